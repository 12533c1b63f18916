package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// env is one server of one kind, a client of it and a Locker on the client.
type env struct {
	server  *redistest.Server
	client  *redis.Client
	locker  *redislock.Locker
	backend redislock.Backend
}

var kinds = []struct {
	kind    redistest.Kind
	backend redislock.Backend
}{
	{redistest.Module, redislock.Module},
	{redistest.Functions, redislock.Functions},
	{redistest.Plain, redislock.Scripts},
}

// eachBackend runs test once per backend, each on a server of its own (the
// backend found by detection, checked).
func eachBackend(t *testing.T, test func(t *testing.T, e *env)) {
	for _, k := range kinds {
		t.Run(k.backend.String(), func(t *testing.T) {
			t.Parallel() // a server each: the backends run side by side
			test(t, newEnv(t, k.kind, k.backend))
		})
	}
}

func newEnv(t *testing.T, kind redistest.Kind, want redislock.Backend) *env {
	server := redistest.Start(t, kind)
	client := server.Client()
	locker := redislock.New(client)
	t.Cleanup(func() { _ = locker.Close() })
	found, err := locker.Backend(context.Background())
	if err != nil || found != want {
		t.Fatalf("detected %v (%v), want %v", found, err, want)
	}
	return &env{server: server, client: client, locker: locker, backend: want}
}

// info is who holds key now; nil if nobody.
func (e *env) info(t *testing.T, key string) *redislock.Info {
	t.Helper()
	info, err := e.locker.Info(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// waiters is how many wait for key: the library counts queue places.
func (e *env) waiters(t *testing.T, key string) int64 {
	t.Helper()
	if info := e.info(t, key); info != nil {
		return info.Waiters
	}
	return 0
}

func (e *env) waitForWaiters(t *testing.T, key string, n int64) {
	t.Helper()
	redistest.WaitUntil(t, 5*time.Second, "waiters on "+key, func() bool { return e.waiters(t, key) == n })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func acquire(t *testing.T, locker *redislock.Locker, key string, ttl time.Duration,
	opts ...redislock.AcquireOption) *redislock.Lock {
	t.Helper()
	lock, err := locker.TryAcquire(context.Background(), key, ttl, opts...)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}
