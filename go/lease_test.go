package redislock

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestTheMarginIsATenthOfTheTTLAndAtLeast50ms(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       time.Second,
		300 * time.Millisecond: 50 * time.Millisecond,
		20 * time.Millisecond:  20 * time.Millisecond,
		time.Millisecond:       time.Millisecond,
		// ttl*10 overflows here: the margin is still a tenth.
		math.MaxInt64:              math.MaxInt64 / 10,
		100 * 365 * 24 * time.Hour: 10 * 365 * 24 * time.Hour,
	} {
		if got := Margin(ttl); got != want {
			t.Errorf("Margin(%v) = %v, want %v", ttl, got, want)
		}
	}
}

func TestALeaseCountsFromTheSendOfTheLastAcknowledgedRenewal(t *testing.T) {
	start := time.Now()
	l, ctx := newLease(context.Background(), "job", start, 10*time.Second, nil)
	defer l.release()
	if _, until, _ := l.state(); !until.Equal(start.Add(9 * time.Second)) {
		t.Fatalf("deadline %v after the send", until.Sub(start))
	}
	w := l.start(10*time.Second, false)
	if !l.acknowledged(w) {
		t.Fatal("a renewal was not taken")
	}
	if _, until, _ := l.state(); !until.Equal(w.sent.Add(9 * time.Second)) {
		t.Errorf("deadline %v after the renewal's send", until.Sub(w.sent))
	}
	if ctx.Err() != nil {
		t.Error("lost while held")
	}
}

// An extend to a shorter TTL on its way shortens the lease at once, and the TTL
// renewals ask for is the one the holder asked for last.
func TestAnExtendOnItsWayToAShorterTTLShortensTheLease(t *testing.T) {
	l, _ := newLease(context.Background(), "job", time.Now(), 30*time.Second, nil)
	defer l.release()
	w := l.start(1200*time.Millisecond, true)
	ttl, until, lost := l.state()
	if lost || ttl != 1200*time.Millisecond || !until.Equal(w.sent.Add(1080*time.Millisecond)) {
		t.Fatalf("ttl %v, deadline %v after the extend's send, lost %v", ttl, until.Sub(w.sent), lost)
	}
	if due := l.renewalDue(); !due.Equal(w.sent.Add(400 * time.Millisecond)) {
		t.Errorf("renewal due %v after the extend's send", due.Sub(w.sent))
	}
}

func TestTheContextEndsAtTheDeadlineWithoutAnyReply(t *testing.T) {
	start := time.Now()
	lost := make(chan error, 1)
	l, ctx := newLease(context.Background(), "job", start, 200*time.Millisecond, func(err error) { lost <- err })
	l.abandoned(l.start(200*time.Millisecond, false), errors.New("no reply in time"))
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not cancelled at the deadline")
	}
	if elapsed := time.Since(start); elapsed < 150*time.Millisecond {
		t.Errorf("cancelled after %v, before the deadline", elapsed)
	}
	var cause *LostError
	if !errors.As(context.Cause(ctx), &cause) || cause.Reason != LeaseRanOut || cause.Err == nil {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	if !errors.Is(context.Cause(ctx), ErrLockLost) || (<-lost) != context.Cause(ctx) {
		t.Error("the cause is not ErrLockLost, or the loss was not told")
	}
	if l.acknowledged(l.start(time.Minute, false)) {
		t.Error("a lost lease was renewed")
	}
}

// The check before a write reads the clock: after a pause of the process, the
// holder's goroutine may run before the lease's timer, and must find the lock lost.
// The timer is stopped here, as if it had not run yet.
func TestTheContextsErrReadsTheClock(t *testing.T) {
	lost := make(chan error, 1)
	l, ctx := newLease(context.Background(), "job", time.Now(), 100*time.Millisecond,
		func(err error) { lost <- err })
	l.timer.Stop()
	inner, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	work := &workContext{Context: inner, lock: ctx, cancel: cancel}
	if ctx.Err() != nil || work.Err() != nil {
		t.Fatal("lost at once")
	}
	time.Sleep(80 * time.Millisecond) // past the deadline: 100 ms less the margin of 50
	select {
	case <-ctx.Done():
		t.Fatal("the stopped timer ended the lease")
	default:
	}
	if work.Err() == nil || ctx.Err() == nil {
		t.Fatal("Err said held past the deadline")
	}
	var cause *LostError
	if !errors.As(context.Cause(work), &cause) || cause.Reason != LeaseRanOut {
		t.Fatalf("the work's cause %v", context.Cause(work))
	}
	if context.Cause(ctx) != context.Cause(work) || (<-lost) != context.Cause(ctx) {
		t.Error("not the lock's cause, or the loss was not told")
	}
}

// context.Cause reads the clock too (it goes through Value).
func TestTheCauseReadsTheClock(t *testing.T) {
	l, ctx := newLease(context.Background(), "job", time.Now(), 60*time.Millisecond, nil)
	l.timer.Stop()
	time.Sleep(30 * time.Millisecond)
	if !errors.Is(context.Cause(ctx), ErrLockLost) {
		t.Fatalf("cause %v past the deadline", context.Cause(ctx))
	}
}

func TestTheFirstEndingStays(t *testing.T) {
	l, ctx := newLease(context.Background(), "job", time.Now(), time.Minute, nil)
	l.lose(Refused, nil)
	l.release()
	l.lose(LeaseRanOut, nil)
	var cause *LostError
	if !errors.As(context.Cause(ctx), &cause) || cause.Reason != Refused {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	released, ctx := newLease(context.Background(), "job", time.Now(), time.Minute, nil)
	released.release()
	released.lose(Refused, nil)
	if context.Cause(ctx) != ErrReleased {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

// The longest TTL a Duration holds (2^63-1 ns, about 292 years; the server's
// 2^62-1 ms is beyond any Duration): no overflow in the deadline, the margin, the
// renewal's schedule, or a wait's bound.
func TestTheLongestTTLAndWaitDoNotOverflow(t *testing.T) {
	const longest = time.Duration(math.MaxInt64)
	start := time.Now()
	l, ctx := newLease(context.Background(), "job", start, longest, nil)
	defer l.release()
	if _, until, lost := l.state(); lost || ctx.Err() != nil || until.Sub(start) < 200*365*24*time.Hour {
		t.Fatalf("lost at once, or a deadline %v away", until.Sub(start))
	}
	if due := l.renewalDue(); due.Sub(start) < 90*365*24*time.Hour {
		t.Errorf("renewal due %v after the acquire", due.Sub(start))
	}
	w := l.start(longest, true)
	if !l.acknowledged(w) || ctx.Err() != nil {
		t.Fatal("a renewal lost it")
	}
	if ms, err := ttlMillis(longest); err != nil || ms != math.MaxInt64/int64(time.Millisecond)+1 {
		t.Errorf("ttl %d ms, %v", ms, err)
	}
	if got := waitBound(longest); got != longest {
		t.Errorf("the wait's bound %v", got)
	}
	bounded, cancel := bound(context.Background(), longest)
	defer cancel()
	if bounded.Err() != nil {
		t.Error("a wait of 292 years ended at once")
	}
	if got := millisDuration(1<<62 - 1); got != longest {
		t.Errorf("2^62-1 ms is %v", got)
	}
}

// A TTL at or under the margin has no lease time: it ends at once, told as a loss.
func TestATTLWithinTheMarginEndsAtOnce(t *testing.T) {
	for _, ttl := range []time.Duration{time.Millisecond, 50 * time.Millisecond} {
		l, ctx := newLease(context.Background(), "job", time.Now(), ttl, nil)
		if !errors.Is(context.Cause(ctx), ErrLockLost) {
			t.Errorf("ttl %v: cause %v", ttl, context.Cause(ctx))
		}
		l.release()
	}
}
