package redislock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// A guarded write lands while the lock is held, with the command's reply as
// go-redis gives it (a status, an integer, redis.Nil, the command's own error);
// once the lock is taken away (DEL) nothing is written, the error is the typed
// fenced one, and the lock's context is cancelled at once (cause Fenced).
func TestAGuardedWriteLandsWhileHeldAndIsFencedOnceNot(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		lock := acquire(t, e.locker, "{g}", 30*time.Second)
		out, stats := "{g}:out", "{g}:stats"
		if got, err := lock.Guard(ctx, []string{out}, "SET", out, "first").Text(); err != nil || got != "OK" {
			t.Fatalf("guarded SET: %q, %v", got, err)
		}
		if n, err := lock.Guard(ctx, []string{stats}, "HINCRBY", stats, "rows", 500).Int64(); err != nil || n != 500 {
			t.Fatalf("guarded HINCRBY: %d, %v", n, err)
		}
		// Compared as go-redis users do: the nil reply is redis.Nil itself.
		if err := lock.Guard(ctx, []string{"{g}:none"}, "GET", "{g}:none").Err(); err != redis.Nil {
			t.Fatalf("guarded GET of a missing key: %v, want redis.Nil", err)
		}
		err := lock.Guard(ctx, []string{out}, "INCR", out).Err()
		var reply redis.Error
		if !errors.As(err, &reply) || !strings.Contains(err.Error(), "not an integer") ||
			errors.Is(err, redislock.ErrFenced) {
			t.Fatalf("guarded INCR of a string: %v, want the command's own error", err)
		}
		if err := lock.Guard(ctx, []string{out}, "SET", out, struct{}{}).Err(); !errors.Is(err,
			redislock.ErrInvalidArgument) {
			t.Fatalf("an argument go-redis cannot send: %v", err)
		}
		if lock.Context().Err() != nil {
			t.Fatalf("the command's own error ended the lock: %v", context.Cause(lock.Context()))
		}

		e.server.Do("DEL", "{g}") // the administrator's force-release
		err = lock.Guard(ctx, []string{out}, "SET", out, "stale").Err()
		var fenced *redislock.FencedError
		if !errors.Is(err, redislock.ErrFenced) || !errors.As(err, &fenced) || fenced.Token != lock.Token() ||
			!strings.Contains(err.Error(), "FENCED token "+strconv.FormatInt(lock.Token(), 10)) ||
			!strings.Contains(err.Error(), "the lock is free") {
			t.Fatalf("guarded SET after DEL: %v, want the FENCED error", err)
		}
		if got := e.server.Do("GET", out); got != "first" {
			t.Fatalf("%s is %v after a fenced write", out, got)
		}
		select {
		case <-lock.Context().Done():
		default:
			t.Fatal("a fenced write left the lock's context open")
		}
		var lost *redislock.LostError
		cause := context.Cause(lock.Context())
		if !errors.As(cause, &lost) || lost.Reason != redislock.Fenced || !errors.Is(cause, redislock.ErrFenced) {
			t.Fatalf("cause %v, want a LostError of Reason Fenced", cause)
		}
	})
}

// A holder whose lock went to another holder is fenced by the server, which names
// the new token; the rival's value stays.
func TestAStaleHolderIsFencedAndTheNewHoldersWriteStays(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		stale := acquire(t, e.locker, "{s}", 30*time.Second)
		e.server.Do("DEL", "{s}")
		rival := acquire(t, e.locker, "{s}", 30*time.Second)
		must(t, rival.Guard(ctx, []string{"{s}:out"}, "SET", "{s}:out", "rival").Err())
		err := stale.Guard(ctx, []string{"{s}:out"}, "SET", "{s}:out", "stale").Err()
		if !errors.Is(err, redislock.ErrFenced) ||
			!strings.Contains(err.Error(), "held with token "+strconv.FormatInt(rival.Token(), 10)) {
			t.Fatalf("stale holder's write: %v, want FENCED naming token %d", err, rival.Token())
		}
		if got := e.server.Do("GET", "{s}:out"); got != "rival" {
			t.Fatalf("{s}:out is %v, want the rival's", got)
		}
		if rival.Context().Err() != nil {
			t.Fatal("the rival lost its lock to the stale holder's fenced write")
		}
	})
}

// A lock the client knows is released (or lost) is refused before anything is
// sent: the server would answer FENCED, the client says why itself.
func TestAGuardedWriteAfterReleaseIsRefusedBeforeSending(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		lock := acquire(t, e.locker, "{r}", 30*time.Second)
		must(t, lock.Guard(ctx, []string{"{r}:out"}, "SET", "{r}:out", "held").Err())
		must(t, lock.Release(ctx))
		err := lock.Guard(ctx, []string{"{r}:out"}, "SET", "{r}:out", "late").Err()
		if !errors.Is(err, redislock.ErrReleased) || errors.Is(err, redislock.ErrFenced) {
			t.Fatalf("guarded write after release: %v, want ErrReleased without a round trip", err)
		}
		if got := e.server.Do("GET", "{r}:out"); got != "held" {
			t.Fatalf("{r}:out is %v", got)
		}
		if err := lock.Guard(ctx, nil).Err(); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Fatalf("a guard without a command: %v", err)
		}
	})
}

// The data keys are declared to the library: named, the write lands; left out, the
// library refuses the command (the module finds them itself).
func TestTheLibraryIsToldTheDataKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		lock := acquire(t, e.locker, "{k}", 30*time.Second)
		must(t, lock.Guard(ctx, []string{"{k}:a", "{k}:b"}, "MSET", "{k}:a", "1", "{k}:b", "2").Err())
		if got := e.server.Do("MGET", "{k}:a", "{k}:b"); len(got.([]any)) != 2 || got.([]any)[1] != "2" {
			t.Fatalf("MGET: %v", got)
		}
		err := lock.Guard(ctx, nil, "SET", "{k}:c", "undeclared").Err()
		if e.backend == redislock.Module {
			must(t, err)
			return
		}
		if err == nil || errors.Is(err, redislock.ErrFenced) || !strings.Contains(err.Error(), "{k}:c") {
			t.Fatalf("a key not declared: %v, want the library's refusal naming it", err)
		}
		if lock.Context().Err() != nil {
			t.Fatal("a refused command ended the lock")
		}
	})
}

// A guarded write is sent once: a reply lost to a broken connection is an error
// that says the write may have run, and the write is not sent again.
func TestAGuardedWriteIsNotSentAgainAfterALostReply(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		proxy := redistest.StartProxy(t, e.server.Addr())
		through := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		defer through.Close()
		locker := redislock.New(through)
		defer locker.Close()
		ctx := context.Background()
		lock := acquire(t, locker, "{n}", 30*time.Second)
		proxy.CutNextReply()
		err := lock.Guard(ctx, []string{"{n}:count"}, "INCR", "{n}:count").Err()
		if err == nil || !strings.Contains(err.Error(), "may have run") {
			t.Fatalf("guarded INCR whose reply was cut: %v", err)
		}
		if got := e.server.Do("GET", "{n}:count"); got != "1" {
			t.Fatalf("{n}:count is %v: the INCR ran %v times, want once", got, got)
		}
		if n, err := lock.Guard(ctx, []string{"{n}:count"}, "INCR", "{n}:count").Int64(); err != nil || n != 2 {
			t.Fatalf("the next guarded INCR: %d, %v", n, err)
		}
	})
}

// A library loaded before lock_guard existed is refused as too old, naming the
// call and what to do, and the lock is not lost; a library deleted under the holder
// (FUNCTION FLUSH) leaves the guard to the scripts path.
func TestALibraryWithoutLockGuard(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t, redistest.Functions)
	const entry = "    { name = 'lock_guard', full = lock_guard, flags = {}, own_oom = true },\n"
	source := redistest.Library(t)
	if !strings.Contains(source, entry) {
		t.Fatal("the library's table of functions has no lock_guard line to leave out")
	}
	server.LoadLibrary(strings.Replace(source, entry, "", 1))
	locker := redislock.New(server.Client())
	defer locker.Close()
	ctx := context.Background()
	lock := acquire(t, locker, "{o}", 30*time.Second)
	err := lock.Guard(ctx, []string{"{o}:out"}, "SET", "{o}:out", "v").Err()
	var version *redislock.LibraryVersionError
	if !errors.As(err, &version) || version.Lacks != "lock_guard" ||
		!strings.Contains(err.Error(), "load the library of this release") {
		t.Fatalf("guard on a library without lock_guard: %v", err)
	}
	if lock.Context().Err() != nil {
		t.Fatal("a library too old ended the lock")
	}
	server.Do("FUNCTION", "FLUSH")
	must(t, lock.Guard(ctx, []string{"{o}:out"}, "SET", "{o}:out", "scripted").Err())
	if got := server.Do("GET", "{o}:out"); got != "scripted" || lock.Backend() != redislock.Scripts {
		t.Fatalf("{o}:out %v on %v after FUNCTION FLUSH", got, lock.Backend())
	}
}

// On a 3-master Cluster: guarded writes on locks in every slot range land on the
// lock key's node; data keys in another slot are CROSSSLOT, with the hash tag to
// use; a fenced write fires the loss there too.
func TestGuardedWritesOnACluster(t *testing.T) {
	t.Parallel() // idle most of the time: beside the other long ones
	for _, k := range []struct {
		kind    redistest.Kind
		backend redislock.Backend
	}{{redistest.Module, redislock.Module}, {redistest.Functions, redislock.Functions}} {
		t.Run(k.backend.String(), func(t *testing.T) {
			cluster := redistest.StartCluster(t, 3, k.kind)
			client := cluster.Client()
			locker := redislock.New(client)
			defer locker.Close()
			ctx := context.Background()
			for _, key := range []string{"{jobs:1}", "{jobs:2}", "{jobs:3}", "x"} {
				lock := acquire(t, locker, key, 30*time.Second)
				out := "{" + strings.Trim(key, "{}") + "}:out"
				must(t, lock.Guard(ctx, []string{out}, "SET", out, key).Err())
				if got, err := client.Get(ctx, out).Result(); err != nil || got != key {
					t.Fatalf("%s: %q, %v", out, got, err)
				}
			}
			lock := acquire(t, locker, "jobs:9", 30*time.Second)
			err := lock.Guard(ctx, []string{"other"}, "SET", "other", "v").Err()
			if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") || !strings.Contains(err.Error(), "{jobs:9}:out") {
				t.Fatalf("a data key in another slot: %v, want CROSSSLOT and the hash tag to use", err)
			}
			must(t, client.Del(ctx, "jobs:9").Err())
			err = lock.Guard(ctx, []string{"{jobs:9}:out"}, "SET", "{jobs:9}:out", "v").Err()
			if !errors.Is(err, redislock.ErrFenced) || lock.Context().Err() == nil {
				t.Fatalf("after DEL: %v (lock context %v), want fenced and lost", err, lock.Context().Err())
			}
		})
	}
}

// The scripts path on Redis 6.2 (EVALSHA, no FUNCTION): guarded writes land, and a
// stale token is fenced.
func TestGuardedWritesOnRedis62(t *testing.T) {
	t.Parallel()
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
	lock := acquire(t, locker, "{six}", 30*time.Second)
	if lock.Backend() != redislock.Scripts {
		t.Fatalf("backend %v", lock.Backend())
	}
	server.Do("SCRIPT", "FLUSH") // loaded again on NOSCRIPT: the call had not run
	must(t, lock.Guard(ctx, []string{"{six}:out"}, "SET", "{six}:out", "v").Err())
	server.Do("DEL", "{six}")
	if err := lock.Guard(ctx, []string{"{six}:out"}, "SET", "{six}:out", "stale").Err(); !errors.Is(err,
		redislock.ErrFenced) {
		t.Fatalf("after DEL: %v", err)
	}
	if got := server.Do("GET", "{six}:out"); got != "v" {
		t.Fatalf("{six}:out is %v", got)
	}
}
