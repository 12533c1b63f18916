package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// On a 3-master Cluster (the module on every node, or the library loaded on every
// master), keys in every slot range: tries, waits on the key's node, renewals,
// releases; tagged and untagged keys.
func TestACluster(t *testing.T) {
	t.Parallel() // idle most of the time: beside the other long ones
	for _, k := range []struct {
		kind    redistest.Kind
		backend redislock.Backend
	}{{redistest.Module, redislock.Module}, {redistest.Functions, redislock.Functions}} {
		t.Run(k.backend.String(), func(t *testing.T) {
			cluster := redistest.StartCluster(t, 3, k.kind)
			locker := redislock.New(cluster.Client())
			defer locker.Close()
			ctx := context.Background()
			if b, err := locker.Backend(ctx); err != nil || b != k.backend {
				t.Fatalf("backend %v: %v", b, err)
			}
			for i, key := range []string{"jobs:1", "jobs:2", "jobs:3", "x", "{jobs}:1", "a{b}c"} {
				holder, err := locker.TryAcquire(ctx, key, 600*time.Millisecond)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if _, err := locker.TryAcquire(ctx, key, time.Second); !errors.Is(err, redislock.ErrNotObtained) {
					t.Fatalf("%s busy: %v", key, err)
				}
				granted := make(chan error, 1)
				go func() {
					lock, err := locker.Acquire(ctx, key, time.Second, redislock.WaitFor(5*time.Second))
					if err == nil {
						err = lock.Release(ctx)
					}
					granted <- err
				}()
				redistest.WaitUntil(t, 5*time.Second, "a waiter", func() bool {
					info, err := locker.Info(ctx, key)
					return err == nil && info != nil && info.Waiters == 1
				})
				if i == 0 {
					time.Sleep(900 * time.Millisecond) // renewed past its TTL on its node
					if err := context.Cause(holder.Context()); err != nil {
						t.Fatalf("%s lost: %v", key, err)
					}
				}
				if err := holder.Release(ctx); err != nil {
					t.Fatalf("%s release: %v", key, err)
				}
				if err := <-granted; err != nil {
					t.Fatalf("%s waiter: %v", key, err)
				}
			}
		})
	}
}

// The scripts path on Redis 6.2 (no FUNCTION): acquire, wait, renew, release. The
// server: REDIS62_SERVER, else target/redis-6.2/redis-server, which `make deps` builds.
func TestRedis62ScriptsPath(t *testing.T) {
	t.Parallel() // idle most of the time: beside the other long ones
	binary := os.Getenv("REDIS62_SERVER")
	if binary == "" {
		binary = filepath.Join(redistest.Root(), "target", "redis-6.2", "redis-server")
	}
	if _, err := osStat(binary); err != nil {
		t.Skipf("skipped: the scripts path on Redis 6.2 (%s is missing; make deps builds it, "+
			"or set REDIS62_SERVER)", binary)
	}
	server := redistest.StartWith(t, redistest.Plain, redistest.Options{Binary: binary})
	locker := redislock.New(server.Client())
	defer locker.Close()
	ctx := context.Background()
	if b, err := locker.Backend(ctx); err != nil || b != redislock.Scripts {
		t.Fatalf("backend %v: %v", b, err)
	}
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
	server.Do("SCRIPT", "FLUSH")
	must(t, holder.Release(ctx))
	if err := <-granted; err != nil {
		t.Fatal(fmt.Errorf("waiter: %w", err))
	}
}
