package redislock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTheMarginIsATenthOfTheTTLAndAtLeast50ms(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       time.Second,
		300 * time.Millisecond: 50 * time.Millisecond,
		20 * time.Millisecond:  20 * time.Millisecond,
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
	if _, _, until, _ := l.state(); !until.Equal(start.Add(9 * time.Second)) {
		t.Fatalf("deadline %v after the send", until.Sub(start))
	}
	later := start.Add(3 * time.Second)
	if !l.renewed(later, 10*time.Second) {
		t.Fatal("a renewal did not move the deadline")
	}
	if l.renewed(start.Add(time.Second), 10*time.Second) {
		t.Error("a late reply to an older extend moved the deadline")
	}
	if _, _, until, _ := l.state(); !until.Equal(later.Add(9 * time.Second)) {
		t.Errorf("deadline %v after the send", until.Sub(start))
	}
	if ctx.Err() != nil {
		t.Error("lost while held")
	}
}

func TestTheContextEndsAtTheDeadlineWithoutAnyReply(t *testing.T) {
	start := time.Now()
	lost := make(chan error, 1)
	l, ctx := newLease(context.Background(), "job", start, 200*time.Millisecond, func(err error) { lost <- err })
	l.failed(errors.New("no reply in time"))
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
	if l.renewed(time.Now(), time.Minute) {
		t.Error("a lost lease was renewed")
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

func TestATTLOfCenturiesDoesNotOverflow(t *testing.T) {
	l, ctx := newLease(context.Background(), "job", time.Now(), time.Duration(1<<63-1), nil)
	defer l.release()
	if _, _, _, lost := l.state(); lost || ctx.Err() != nil {
		t.Fatal("lost at once")
	}
}
