package redislock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// Through a black-holed network the holder's context is cancelled before the
// server could grant the lock to a rival waiting in its queue: at the lease's
// deadline, the last acknowledged renewal's send + TTL - margin.
func TestThroughABlackHoleTheHolderIsToldBeforeARivalIsGranted(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		proxy := redistest.StartProxy(t, e.server.Addr())
		through := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		defer through.Close()
		holders := redislock.New(through)
		defer holders.Close()
		const ttl = 2 * time.Second
		holder, err := holders.TryAcquire(context.Background(), "job", ttl)
		must(t, err)
		time.Sleep(900 * time.Millisecond) // at least one renewal went through
		granted := make(chan time.Time, 1)
		go func() {
			rival, err := e.locker.Acquire(context.Background(), "job", ttl, redislock.WaitFor(6*time.Second))
			if err != nil {
				t.Error(err)
				granted <- time.Time{}
				return
			}
			granted <- time.Now()
			_ = rival.Release(context.Background())
		}()
		e.waitForWaiters(t, "job", 1)
		validUntil := holder.ValidUntil()
		proxy.BlackHole()
		select {
		case <-holder.Context().Done():
		case <-time.After(2 * ttl):
			t.Fatal("not told")
		}
		lostAt := time.Now()
		grantedAt := <-granted
		if grantedAt.IsZero() || !lostAt.Before(grantedAt) {
			t.Fatalf("lost at %v, the rival granted at %v", lostAt, grantedAt)
		}
		// Not by luck of scheduling: at the deadline, give or take scheduling.
		if late := lostAt.Sub(validUntil); late > redislock.Margin(ttl)/2 {
			t.Errorf("told %v after the lease's deadline", late)
		}
		var lost *redislock.LostError
		if !errors.As(context.Cause(holder.Context()), &lost) || lost.Reason != redislock.LeaseRanOut {
			t.Fatalf("cause %v", context.Cause(holder.Context()))
		}
		t.Logf("told %v before the rival was granted", grantedAt.Sub(lostAt))
	})
}

func TestAStoppedServerLosesTheLockAtTheLeaseDeadline(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		const ttl = time.Second
		start := time.Now()
		holder := acquire(t, e.locker, "job", ttl)
		e.server.Pause()
		select {
		case <-holder.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatal("not told")
		}
		if elapsed := time.Since(start); elapsed > ttl {
			t.Errorf("told after %v, beyond the TTL", elapsed)
		}
	})
}

// A wait on a server that answers nothing ends within its wait, the margin and the
// withdrawal's bound, saying that the server did not answer.
func TestAWaitOnAStoppedServerEndsNearItsTimeout(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		acquire(t, e.locker, "job", 30*time.Second)
		// A library wait is many calls: stop the server midway through it, so
		// each later call is bounded by what is left of the wait.
		go func() {
			time.Sleep(300 * time.Millisecond)
			e.server.Pause()
		}()
		const wait = 800 * time.Millisecond
		limit := wait + redislock.WaitMargin + 500*time.Millisecond
		start := time.Now()
		ended := make(chan error, 1)
		go func() {
			_, err := e.locker.Acquire(context.Background(), "job", time.Second, redislock.WaitFor(wait))
			ended <- err
		}()
		select {
		case err := <-ended:
			if !errors.Is(err, redislock.ErrUnanswered) {
				t.Fatalf("%v", err)
			}
			if elapsed := time.Since(start); elapsed > limit {
				t.Errorf("gave up after %v, beyond %v", elapsed, limit)
			}
		case <-time.After(2 * limit):
			t.Fatalf("still waiting after %v on a stopped server", 2*limit)
		}
	})
}

// A server restarted without persistence lost the lock (and the library, which
// functions do not keep without an RDB): the holder is told at its next renewal,
// which the server answers 0, not when the lease runs out. On the library the
// renewal gets ERR Function not found and goes through the scripts path at once.
func TestARestartedServerThatLostTheLockRefusesTheNextRenewal(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		const ttl = 3 * time.Second
		holder := acquire(t, e.locker, "job", ttl)
		e.server.Restart()
		select {
		case <-holder.Context().Done():
		case <-time.After(ttl):
			t.Fatal("not told")
		}
		var lost *redislock.LostError
		if !errors.As(context.Cause(holder.Context()), &lost) || lost.Reason != redislock.Refused {
			t.Fatalf("cause %v", context.Cause(holder.Context()))
		}
		// The locker finds out what the restarted server offers (a plain server
		// now, for the library: the library sent as a script).
		again, err := e.locker.TryAcquire(context.Background(), "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Release(context.Background())
		want := redislock.Module
		if e.backend != redislock.Module {
			want = redislock.Scripts
		}
		if again.Backend() != want {
			t.Errorf("after the restart: %v", again.Backend())
		}
	})
}

// FUNCTION FLUSH under a holder: the holding is still there, and renewal goes on
// through the scripts path.
func TestAFlushedLibraryDoesNotLoseAHolding(t *testing.T) {
	e := newEnv(t, redistest.Functions, redislock.Functions)
	holder := acquire(t, e.locker, "job", 600*time.Millisecond)
	e.server.Do("FUNCTION", "FLUSH")
	time.Sleep(1500 * time.Millisecond)
	if err := context.Cause(holder.Context()); err != nil {
		t.Fatalf("lost: %v", err)
	}
	if holder.Backend() != redislock.Scripts {
		t.Errorf("renewed through %v", holder.Backend())
	}
	must(t, holder.Release(context.Background()))
}

// SCRIPT FLUSH (a restart, a failover to a node that never saw the script) loads
// the library again and sends the call once more.
func TestTheScriptsBackendLoadsTheLibraryAgainAfterAScriptFlush(t *testing.T) {
	e := newEnv(t, redistest.Plain, redislock.Scripts)
	flush := func() { e.server.Do("SCRIPT", "FLUSH") }
	flush()
	lock := acquire(t, e.locker, "job", time.Second)
	flush()
	time.Sleep(800 * time.Millisecond) // a renewal
	if err := context.Cause(lock.Context()); err != nil {
		t.Fatalf("lost: %v", err)
	}
	flush()
	if info := e.info(t, "job"); info == nil || info.Holders[0].Owner != lock.Owner() {
		t.Fatalf("info %+v", info)
	}
	flush()
	must(t, lock.Release(context.Background()))
}

// A try whose reply is lost to a broken connection (the server ran it) is asked for
// once more as the same owner, on a fresh connection: the server answers with the
// token the first try got, and one holding is there.
func TestATryWhoseReplyIsLostIsAskedAgainAsTheSameOwner(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		proxy := redistest.StartProxy(t, e.server.Addr())
		through := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		defer through.Close()
		locker := redislock.New(through)
		defer locker.Close()
		ctx := context.Background()
		if _, err := locker.Backend(ctx); err != nil { // detected before the cut
			t.Fatal(err)
		}
		proxy.CutNextReply()
		lock, err := locker.TryAcquire(ctx, "job", ttl)
		must(t, err)
		defer lock.Release(ctx)
		info := e.info(t, "job")
		if info == nil || len(info.Holders) != 1 || info.Holders[0].Token != lock.Token() ||
			info.Holders[0].Owner != lock.Owner() {
			t.Fatalf("info %+v, lock %d %q", info, lock.Token(), lock.Owner())
		}
	})
}

// An older library loaded over the one the locker found cannot read what that one
// wrote and answers WRONGTYPE: the locker asks lock_version and says which version
// the server has now.
func TestAnOlderLibraryLoadedUnderAHolderIsNamed(t *testing.T) {
	e := newEnv(t, redistest.Functions, redislock.Functions)
	ctx := context.Background()
	lock, err := e.locker.TryAcquire(ctx, "job", ttl, redislock.Limit(3), redislock.WithoutRenewal())
	must(t, err)
	old, err := os.ReadFile(filepath.Join(redistest.Root(), "tests", "fixtures", "redislock-v1.lua"))
	if err != nil {
		t.Skipf("no version-1 library to load: %v", err)
	}
	e.server.LoadLibrary(string(old))
	err = lock.Extend(ctx, ttl)
	var version *redislock.LibraryVersionError
	if !errors.As(err, &version) || version.Found != 1 {
		t.Fatalf("%v", err)
	}
}

// A release whose reply is lost to a broken connection (the server ran it) is sent
// once more, and answered 0: that is a release, not ErrNotHeld, and Run does not
// call work that held the lock throughout lost.
func TestAReleaseWhoseReplyIsLostIsStillARelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		proxy := redistest.StartProxy(t, e.server.Addr())
		through := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		defer through.Close()
		locker := redislock.New(through)
		defer locker.Close()
		ctx := context.Background()
		lock, err := locker.TryAcquire(ctx, "job", 30*time.Second)
		must(t, err)
		proxy.CutNextReply()
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if info := e.info(t, "job"); info != nil {
			t.Fatalf("still held: %+v", info)
		}
		err = locker.Run(ctx, "job", 30*time.Second, func(context.Context, *redislock.Lock) error {
			proxy.CutNextReply() // the release's
			return nil
		})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if info := e.info(t, "job"); info != nil {
			t.Fatalf("still held after run: %+v", info)
		}
		// Under an owner id the caller gave, another holder may have acquired since
		// the first release: no second one, the connection's error.
		given, err := locker.TryAcquire(ctx, "job", 30*time.Second, redislock.WithOwner("worker-1"))
		must(t, err)
		proxy.CutNextReply()
		err = given.Release(ctx)
		if err == nil || errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("a given owner's release whose reply was lost: %v", err)
		}
		if info := e.info(t, "job"); info != nil {
			t.Fatalf("still held: %+v", info)
		}
	})
}

// On the library, a wait without a time limit is many steps (lock_wait, BLPOP, …),
// each with a bound: when the path goes dead, the wait ends with ErrUnanswered
// within a BLPOP's block (2 s at most, the place's lease), its margin and a
// lock_wait's bound, instead of hanging while its place lapses in the server.
func TestALibraryWaitWithoutLimitEndsOnADeadPath(t *testing.T) {
	for _, k := range kinds[1:] {
		t.Run(k.backend.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, k.kind, k.backend)
			acquire(t, e.locker, "job", 30*time.Second)
			proxy := redistest.StartProxy(t, e.server.Addr())
			through := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
			defer through.Close()
			waiters := redislock.New(through)
			defer waiters.Close()
			ended := make(chan error, 1)
			go func() {
				_, err := waiters.Acquire(context.Background(), "job", 5*time.Second)
				ended <- err
			}()
			e.waitForWaiters(t, "job", 1)
			time.Sleep(500 * time.Millisecond) // into a BLPOP
			proxy.BlackHole()
			cut := time.Now()
			limit := 2*time.Second + redislock.ControlLimit + redislock.WaitMargin
			select {
			case err := <-ended:
				if !errors.Is(err, redislock.ErrUnanswered) {
					t.Fatalf("%v", err)
				}
				if elapsed := time.Since(cut); elapsed > limit {
					t.Errorf("ended %v after the cut, beyond %v", elapsed, limit)
				}
				t.Logf("ended %v after the cut: %v", time.Since(cut).Round(time.Millisecond), err)
			case <-time.After(3 * limit):
				t.Fatalf("still waiting %v after the cut", 3*limit)
			}
		})
	}
}
