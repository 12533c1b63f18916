package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// Through a Sentinel failover client, waits and renewals reach the master the
// sentinels name, on connections of their own.
func TestASentinelFailoverClient(t *testing.T) {
	master := redistest.Start(t, redistest.Module)
	sentinel := redistest.StartSentinel(t, master)
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr()},
	})
	defer client.Close()
	locker := redislock.New(client)
	defer locker.Close()
	ctx := context.Background()
	holder, err := locker.TryAcquire(ctx, "job", 600*time.Millisecond)
	must(t, err)
	granted := make(chan error, 1)
	go func() {
		lock, err := locker.Acquire(ctx, "job", time.Second, redislock.WaitFor(5*time.Second))
		if err == nil {
			err = lock.Release(ctx)
		}
		granted <- err
	}()
	time.Sleep(900 * time.Millisecond)
	if err := context.Cause(holder.Context()); err != nil {
		t.Fatalf("lost: %v", err)
	}
	must(t, holder.Release(ctx))
	must(t, <-granted)
}
