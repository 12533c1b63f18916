package redislock_test

import (
	"context"
	"testing"
	"time"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// BenchmarkAcquireRelease is one client's acquire (waiting, as the peers bench
// does) and release of a free lock on the module: the client's own cost per cycle.
// `go test -run - -bench AcquireRelease -cpuprofile cpu.out` shows where it goes.
func BenchmarkAcquireRelease(b *testing.B) {
	server := redistest.Start(b, redistest.Module)
	locker := redislock.New(server.Client())
	defer locker.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lock, err := locker.Acquire(ctx, "job", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
