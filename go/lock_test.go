package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

const ttl = 10 * time.Second

func TestAcquireReleaseAndBusy(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		lock := acquire(t, e.locker, "job", ttl)
		if lock.Token() <= 0 || lock.Key() != "job" || lock.Backend() != e.backend {
			t.Fatalf("token %d key %q backend %v", lock.Token(), lock.Key(), lock.Backend())
		}
		info := e.info(t, "job")
		if info == nil || info.Mode != "exclusive" || len(info.Holders) != 1 ||
			info.Holders[0].Owner != lock.Owner() || info.Holders[0].Token != lock.Token() {
			t.Fatalf("info %+v", info)
		}
		if _, err := e.locker.TryAcquire(ctx, "job", ttl); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("a busy lock: %v", err)
		}
		must(t, lock.Release(ctx))
		if context.Cause(lock.Context()) != redislock.ErrReleased {
			t.Errorf("cause after release: %v", context.Cause(lock.Context()))
		}
		if err := lock.Release(ctx); !errors.Is(err, redislock.ErrNotHeld) {
			t.Errorf("a second release: %v", err)
		}
		again := acquire(t, e.locker, "job", ttl)
		if again.Token() <= lock.Token() {
			t.Errorf("token %d after %d", again.Token(), lock.Token())
		}
		if e.info(t, "absent") != nil {
			t.Error("info of a free key")
		}
	})
}

func TestTheSameOwnerRefreshesAndGetsTheSameToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		first := acquire(t, e.locker, "job", ttl, redislock.WithOwner("worker-7"))
		second := acquire(t, e.locker, "job", ttl, redislock.WithOwner("worker-7"))
		if first.Token() != second.Token() || second.Owner() != "worker-7" {
			t.Fatalf("tokens %d and %d", first.Token(), second.Token())
		}
	})
}

func TestSharedHoldingsAndSemaphores(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		r1 := acquire(t, e.locker, "catalog", ttl, redislock.Shared())
		r2 := acquire(t, e.locker, "catalog", ttl, redislock.Shared())
		if r1.Token() == r2.Token() {
			t.Error("two shared holdings share a token")
		}
		if info := e.info(t, "catalog"); info.Mode != "shared" || len(info.Holders) != 2 {
			t.Fatalf("info %+v", info)
		}
		if _, err := e.locker.TryAcquire(ctx, "catalog", ttl); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("a writer beside readers: %v", err)
		}
		for i := 0; i < 2; i++ {
			acquire(t, e.locker, "exports", ttl, redislock.Limit(2))
		}
		if _, err := e.locker.TryAcquire(ctx, "exports", ttl, redislock.Limit(2)); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("a third permit of two: %v", err)
		}
		acquire(t, e.locker, "exports", ttl, redislock.Limit(3))
	})
}

func TestAWaiterIsGrantedWhenTheHolderReleases(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		holder := acquire(t, e.locker, "job", ttl)
		got := make(chan *redislock.Lock, 1)
		go func() {
			lock, err := e.locker.Acquire(ctx, "job", ttl, redislock.WaitFor(10*time.Second))
			if err != nil {
				t.Error(err)
			}
			got <- lock
		}()
		e.waitForWaiters(t, "job", 1)
		must(t, holder.Release(ctx))
		select {
		case lock := <-got:
			if lock == nil || lock.Token() <= holder.Token() {
				t.Fatalf("granted %v", lock)
			}
			must(t, lock.Release(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not granted")
		}
	})
}

// A lock granted after a wait longer than its TTL holds for its TTL from the
// grant: the module counts it from there, the library's last lock_wait refreshes it.
func TestALockGrantedAfterAWaitLongerThanItsTTLHolds(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		holder := acquire(t, e.locker, "job", ttl)
		go func() {
			time.Sleep(800 * time.Millisecond)
			_ = holder.Release(ctx)
		}()
		lock, err := e.locker.Acquire(ctx, "job", 400*time.Millisecond, redislock.WaitFor(5*time.Second),
			redislock.WithoutRenewal())
		must(t, err)
		defer lock.Release(ctx)
		if err := context.Cause(lock.Context()); err != nil {
			t.Fatalf("lost as it was granted: %v", err)
		}
		if left := time.Until(lock.ValidUntil()); left < 200*time.Millisecond {
			t.Errorf("a lease of %v left at the grant", left)
		}
	})
}

func TestWaitersAreGrantedInArrivalOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		holder := acquire(t, e.locker, "job", ttl)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lock, err := e.locker.Acquire(ctx, "job", ttl, redislock.WaitFor(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				_ = lock.Release(ctx)
			}()
			e.waitForWaiters(t, "job", int64(i+1))
		}
		must(t, holder.Release(ctx))
		wg.Wait()
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Fatalf("granted in the order %v", order)
		}
	})
}

func TestAWaitThatRunsOutIsNotObtainedAndLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		acquire(t, e.locker, "job", ttl)
		start := time.Now()
		_, err := e.locker.Acquire(context.Background(), "job", ttl, redislock.WaitFor(300*time.Millisecond))
		if !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("%v", err)
		}
		if elapsed := time.Since(start); elapsed < 300*time.Millisecond || elapsed > 300*time.Millisecond+redislock.WaitMargin {
			t.Errorf("gave up after %v", elapsed)
		}
		if n := e.waiters(t, "job"); n != 0 {
			t.Errorf("%d waiters left", n)
		}
	})
}

// A wait ended by its context's deadline: the server's wait ends a little before
// it, so a busy lock is ErrNotObtained, not the deadline.
func TestAWaitUntilTheContextsDeadlineIsNotObtained(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		acquire(t, e.locker, "job", ttl)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := e.locker.Acquire(ctx, "job", ttl); !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("%v", err)
		}
	})
}

// A wait whose context is cancelled returns at once, withdrawn from the queue:
// the lock goes to the next waiter, and nothing is held under the cancelled
// request's owner.
func TestACancelledWaitWithdrawsFromTheQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		holder := acquire(t, e.locker, "job", ttl)
		ctx, cancel := context.WithCancel(context.Background())
		cancelled := make(chan error, 1)
		go func() {
			_, err := e.locker.Acquire(ctx, "job", ttl, redislock.WithOwner("cancelled"))
			cancelled <- err
		}()
		e.waitForWaiters(t, "job", 1)
		start := time.Now()
		cancel()
		select {
		case err := <-cancelled:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%v", err)
			}
			if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
				t.Errorf("returned %v after the cancellation", elapsed)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a cancelled wait did not return")
		}
		// The module drops the waiter as soon as it sees the connection closed.
		redistest.WaitUntil(t, time.Second, "no waiter left", func() bool { return e.waiters(t, "job") == 0 })
		must(t, holder.Release(context.Background()))
		next := acquire(t, e.locker, "job", ttl) // free: nobody was granted it
		if info := e.info(t, "job"); info.Holders[0].Owner != next.Owner() {
			t.Fatalf("held by %q", info.Holders[0].Owner)
		}
	})
}

func TestRenewalKeepsTheLockPastItsTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		lock := acquire(t, e.locker, "job", 600*time.Millisecond)
		time.Sleep(1500 * time.Millisecond)
		if err := context.Cause(lock.Context()); err != nil {
			t.Fatalf("lost: %v", err)
		}
		if info := e.info(t, "job"); info == nil || info.Holders[0].Token != lock.Token() {
			t.Fatalf("info %+v", info)
		}
		if time.Until(lock.ValidUntil()) <= 0 {
			t.Error("the lease did not move")
		}
	})
}

func TestWithoutRenewalTheContextEndsAtTheLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		start := time.Now()
		lock := acquire(t, e.locker, "job", 300*time.Millisecond, redislock.WithoutRenewal())
		select {
		case <-lock.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("not told")
		}
		if elapsed := time.Since(start); elapsed > 300*time.Millisecond-redislock.Margin(300*time.Millisecond)+200*time.Millisecond {
			t.Errorf("lost after %v", elapsed)
		}
		var lost *redislock.LostError
		if !errors.As(context.Cause(lock.Context()), &lost) || lost.Reason != redislock.LeaseRanOut {
			t.Fatalf("cause %v", context.Cause(lock.Context()))
		}
	})
}

// DEL of the key is the administrator's force-release: the holder hears of it at
// its next renewal, before the lease would have run out.
func TestADeletedLockIsLostAtTheNextRenewal(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		lock := acquire(t, e.locker, "job", 900*time.Millisecond)
		e.server.Do("DEL", "job")
		select {
		case <-lock.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("not told")
		}
		var lost *redislock.LostError
		if !errors.As(context.Cause(lock.Context()), &lost) || lost.Reason != redislock.Refused {
			t.Fatalf("cause %v", context.Cause(lock.Context()))
		}
	})
}

func TestRunReleasesAfterTheWorkAndOnPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var token int64
		err := e.locker.Run(ctx, "job", ttl, func(ctx context.Context, lock *redislock.Lock) error {
			token = lock.Token()
			if e.info(t, "job") == nil {
				t.Error("not held while the work runs")
			}
			return nil
		})
		if err != nil || token <= 0 || e.info(t, "job") != nil {
			t.Fatalf("run: %v, token %d, still held: %v", err, token, e.info(t, "job") != nil)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not come through")
				}
			}()
			_ = e.locker.Run(ctx, "job", ttl, func(context.Context, *redislock.Lock) error { panic("boom") })
		}()
		if e.info(t, "job") != nil {
			t.Fatal("a panicking work left its lock held")
		}
		busy := acquire(t, e.locker, "job", ttl)
		ran := false
		err = e.locker.Run(ctx, "job", ttl, func(context.Context, *redislock.Lock) error {
			ran = true
			return nil
		}, redislock.WaitFor(0))
		if ran || !errors.Is(err, redislock.ErrNotObtained) {
			t.Fatalf("ran %v: %v", ran, err)
		}
		_ = busy
	})
}

// The work's context ends when the lock is lost, with the loss as its cause, and
// Run says so even when the work returns nil.
func TestRunTellsTheWorkOfTheLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		err := e.locker.Run(context.Background(), "job", 900*time.Millisecond,
			func(ctx context.Context, lock *redislock.Lock) error {
				e.server.Do("DEL", "job")
				select {
				case <-ctx.Done():
				case <-time.After(3 * time.Second):
					t.Error("the work was not told")
				}
				if !errors.Is(context.Cause(ctx), redislock.ErrLockLost) {
					t.Errorf("cause %v", context.Cause(ctx))
				}
				return nil
			})
		if !errors.Is(err, redislock.ErrLockLost) {
			t.Fatalf("run: %v", err)
		}
	})
}

func TestAKeyOfAnotherTypeIsTheServersError(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.server.Do("SET", "text", "x")
		_, err := e.locker.TryAcquire(context.Background(), "text", ttl)
		if err == nil || errors.Is(err, redislock.ErrNotObtained) || !containsAny(err.Error(), "WRONGTYPE") {
			t.Fatalf("%v", err)
		}
	})
}

func TestAPlainServerWithoutScriptsSaysWhatToDo(t *testing.T) {
	server := redistest.Start(t, redistest.Plain)
	server.Do("ACL", "SETUSER", "default", "-evalsha", "-fcall_ro", "-script")
	locker := redislock.New(server.Client())
	_, err := locker.TryAcquire(context.Background(), "job", ttl)
	if !errors.Is(err, redislock.ErrNoBackend) || !containsAny(err.Error(), "FUNCTION LOAD") ||
		!containsAny(err.Error(), "NOPERM") {
		t.Fatalf("%v", err)
	}
	forced := redislock.New(redistest.Start(t, redistest.Plain).Client(), redislock.WithBackend(redislock.Module))
	if _, err := forced.TryAcquire(context.Background(), "job", ttl); !errors.Is(err, redislock.ErrNoBackend) {
		t.Fatalf("forced module: %v", err)
	}
}

func TestALibraryOfAnotherVersionIsRefusedNamingIt(t *testing.T) {
	server := redistest.Start(t, redistest.Plain)
	source := redistest.Library(t)
	for _, v := range []int64{redislock.MinLibraryVersion - 1, redislock.LibraryVersion + 1} {
		server.LoadLibrary(replaceVersion(t, source, v))
		locker := redislock.New(server.Client())
		_, err := locker.TryAcquire(context.Background(), "job", ttl)
		var version *redislock.LibraryVersionError
		if !errors.As(err, &version) || version.Found != v {
			t.Fatalf("version %d: %v", v, err)
		}
	}
}

// After an extend from a long TTL to a short one, renewals come at a third of the
// short one: a healthy holder keeps the lock.
func TestAnExtendToAShorterTTLKeepsAHealthyLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		lock := acquire(t, e.locker, "job", 30*time.Second)
		const short = 1200 * time.Millisecond
		must(t, lock.Extend(context.Background(), short))
		if lock.TTL() != short {
			t.Errorf("TTL %v", lock.TTL())
		}
		time.Sleep(3 * short)
		if err := context.Cause(lock.Context()); err != nil {
			t.Fatalf("lost: %v", err)
		}
		if info := e.info(t, "job"); info == nil || info.Holders[0].Owner != lock.Owner() ||
			info.Holders[0].TTL > short {
			t.Fatalf("info %+v", info)
		}
		must(t, lock.Release(context.Background()))
	})
}

// The longest TTL and wait a time.Duration holds (about 292 years: the server's
// 2^62-1 ms is beyond any Duration) are held, renewed and waited for; TTLs at or
// under the lease's margin are granted, and their lease ends at once.
func TestTheLongestTTLAndWaitWork(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		const longest = time.Duration(math.MaxInt64)
		ctx := context.Background()
		holder := acquire(t, e.locker, "job", longest)
		granted := make(chan error, 1)
		go func() {
			waiter, err := e.locker.Acquire(ctx, "job", 5*time.Second, redislock.WaitFor(longest))
			if err == nil {
				err = waiter.Release(ctx)
			}
			granted <- err
		}()
		e.waitForWaiters(t, "job", 1)
		time.Sleep(300 * time.Millisecond)
		if err := context.Cause(holder.Context()); err != nil {
			t.Fatalf("lost: %v", err)
		}
		if e.waiters(t, "job") != 1 {
			t.Fatal("the waiter left the queue")
		}
		must(t, holder.Release(ctx))
		select {
		case err := <-granted:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not granted")
		}
		for _, ttl := range []time.Duration{time.Millisecond, 50 * time.Millisecond} {
			lock, err := e.locker.TryAcquire(ctx, fmt.Sprintf("short:%v", ttl), ttl)
			if err != nil {
				t.Fatalf("ttl %v: %v", ttl, err)
			}
			if !errors.Is(context.Cause(lock.Context()), redislock.ErrLockLost) {
				t.Errorf("ttl %v: cause %v", ttl, context.Cause(lock.Context()))
			}
			_ = lock.Release(ctx)
		}
	})
}
