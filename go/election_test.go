package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

func election(t *testing.T, locker *redislock.Locker, key string, ttl time.Duration) *redislock.Election {
	t.Helper()
	e, err := locker.Election(key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A leader publishes its value; a rival waits in the queue; resign hands over at
// once with a greater term; the record says who leads, and nobody after the end.
func TestAnElectionHandsOverAtResign(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		el := election(t, e.locker, "scheduler", 10*time.Second)
		if el.RecordKey() != "{scheduler}:leader" {
			t.Fatalf("record %q", el.RecordKey())
		}
		first, err := el.Campaign(ctx, "node-a")
		must(t, err)
		if got, err := el.Leader(ctx); err != nil || got == nil || *got != (redislock.Leader{Term: first.Term(), Value: "node-a"}) {
			t.Fatalf("leader %v, %v", got, err)
		}
		type won struct {
			ld *redislock.Leadership
			at time.Time
		}
		rival := make(chan won, 1)
		go func() {
			ld, err := el.Campaign(ctx, "node-b")
			if err != nil {
				t.Error(err)
			}
			rival <- won{ld, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond)
		select {
		case <-rival:
			t.Fatal("two leaders at once")
		default:
		}
		resigned := time.Now()
		must(t, first.Resign(ctx))
		second := <-rival
		if d := second.at.Sub(resigned); d > 2*time.Second {
			t.Fatalf("handed over after %v: the TTL, not the queue", d)
		}
		if second.ld.Term() <= first.Term() {
			t.Fatalf("terms %d then %d", first.Term(), second.ld.Term())
		}
		if got, _ := el.Leader(ctx); got == nil || got.Value != "node-b" {
			t.Fatalf("leader %v", got)
		}
		if first.Context().Err() == nil {
			t.Fatal("a resigned leadership's context is live")
		}
		must(t, second.ld.Resign(ctx))
		if got, err := el.Leader(ctx); got != nil || err != nil {
			t.Fatalf("after resign: %v, %v", got, err)
		}
	})
}

// An observer gets every leader once, in term order, also leaders that led only
// for a moment.
func TestAnObserverSeesEveryLeaderOnceInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		el := election(t, e.locker, "{svc}:lock", 10*time.Second)
		seen := el.Observe(ctx)
		time.Sleep(200 * time.Millisecond)
		var led []redislock.Leader
		for n := range 6 {
			ld, err := el.Campaign(ctx, string(rune('a'+n)))
			must(t, err)
			led = append(led, redislock.Leader{Term: ld.Term(), Value: ld.Value()})
			must(t, ld.Resign(ctx))
		}
		for i, want := range led {
			select {
			case got := <-seen:
				if got != want {
					t.Fatalf("leader %d: %v, want %v", i, got, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("leader %d never seen", i)
			}
		}
	})
}

// A leader cut off from the server is told before the rival leads, and its term
// no longer writes.
func TestADeposedLeaderIsToldFirstAndFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		proxy := redistest.StartProxy(t, e.server.Addr())
		cutLocker := redislock.New(redis.NewClient(&redis.Options{Addr: proxy.Addr()}))
		defer cutLocker.Close()
		ttl := 1500 * time.Millisecond
		old, err := election(t, cutLocker, "{cut}", ttl).Campaign(ctx, "old")
		must(t, err)
		proxy.BlackHole()
		nw, err := election(t, e.locker, "{cut}", ttl).Campaign(ctx, "new")
		must(t, err)
		if old.Context().Err() == nil {
			t.Fatal("the deposed leader was not told before the rival led")
		}
		if nw.Term() <= old.Term() {
			t.Fatalf("terms %d then %d", old.Term(), nw.Term())
		}
		// The old term, sent by hand on a path that works: the server refuses it.
		var guard []any
		switch e.backend {
		case redislock.Module:
			guard = []any{"LOCK.GUARD", "{cut}", old.Term()}
		case redislock.Functions:
			guard = []any{"FCALL", "lock_guard", 2, "{cut}", "{cut}:out", old.Term()}
		}
		if guard != nil {
			err = e.client.Do(ctx, append(guard, "SET", "{cut}:out", "old")...).Err()
			if err == nil || !containsAny(err.Error(), "FENCED") {
				t.Fatalf("old term's write: %v", err)
			}
		}
		must(t, nw.Guard(ctx, []string{"{cut}:out"}, "SET", "{cut}:out", "new"))
		if got, _ := e.client.Get(ctx, "{cut}:out").Result(); got != "new" {
			t.Fatalf("out %q", got)
		}
		must(t, nw.Resign(ctx))
	})
}

// RunWhileLeader ends the work's context when leadership is lost (DEL) and, asked
// to, campaigns again with a greater term; it resigns when the work returns.
func TestRunWhileLeaderCampaignsAgainAfterALoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		el := election(t, e.locker, "again", 600*time.Millisecond)
		var (
			mu    sync.Mutex
			terms []int64
		)
		err := el.RunWhileLeader(ctx, "me", true, func(ctx context.Context, ld *redislock.Leadership) error {
			mu.Lock()
			terms = append(terms, ld.Term())
			first := len(terms) == 1
			mu.Unlock()
			if first {
				must(t, e.client.Del(ctx, "again").Err())
				<-ctx.Done()
				if !errors.Is(context.Cause(ctx), redislock.ErrLockLost) {
					t.Errorf("cause %v", context.Cause(ctx))
				}
			}
			return nil
		})
		must(t, err)
		if len(terms) != 2 || terms[1] <= terms[0] {
			t.Fatalf("terms %v", terms)
		}
		if got, _ := el.Leader(ctx); got != nil {
			t.Fatalf("leader after the end: %v", got)
		}
		// Without again, the loss is the answer.
		err = el.RunWhileLeader(ctx, "me", false, func(ctx context.Context, ld *redislock.Leadership) error {
			must(t, e.client.Del(ctx, "again").Err())
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, redislock.ErrLockLost) {
			t.Fatalf("without again: %v", err)
		}
	})
}

func TestBadElectionKeysAndValuesAreRefused(t *testing.T) {
	locker := redislock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if _, err := locker.Election("a}b", time.Second); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("a}b: %v", err)
	}
	el, err := locker.Election("k", time.Second)
	must(t, err)
	long := make([]byte, 1025)
	if _, err := el.Campaign(context.Background(), string(long)); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("long value: %v", err)
	}
}

// An election through a Cluster client: the record lives in the key's slot.
func TestAnElectionOnACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, redistest.Module)
	locker := redislock.New(cluster.Client())
	defer locker.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := election(t, locker, "scheduler", 10*time.Second)
	seen := el.Observe(ctx)
	ld, err := el.Campaign(ctx, "a")
	must(t, err)
	select {
	case got := <-seen:
		if got.Term != ld.Term() || got.Value != "a" {
			t.Fatalf("seen %v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not seen")
	}
	must(t, ld.Resign(ctx))
}
