package redislock

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The holder's side of a lock: a lease with a local deadline.
//
// The server counts a lock's TTL from the moment it runs the acquire or extend,
// which is after the client sent it. So the client knows the lock is the server's to
// keep until at least *send time + TTL*, whatever happened to the reply; when writes
// with different TTLs may reach the server in another order than sent, until the
// earliest such bound of the writes that could be the last one applied (the lease
// rule, leaserule.go). The lease ends a margin earlier, for the two clocks' drift
// and for the wake-up of whoever waits on the signal: [Margin] is 10% of the TTL, at
// least 50 ms. The lock's context is cancelled at that deadline by a timer of its
// own, whatever the renewals are doing, so the holder hears of the loss before the
// server could grant the lock to anyone else, also when no reply ever comes back (a
// partition, a hung server). Its Err reads the clock as well (leaseContext): a
// holder whose process was stopped past the deadline finds the lock lost when it
// checks, even if its own goroutine runs before the lease's timer.
//
// What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
// SIGSTOP, a suspended VM) between checking the context and writing; a local clock
// that runs more than 10% slow against the server's. Fencing tokens cover those.

// Margin is how much earlier than *send time + TTL* a lease ends: 10% of the TTL,
// at least 50 ms, and never more than the TTL (a lock of 50 ms or less has no lease
// time at all).
func Margin(ttl time.Duration) time.Duration {
	// A tenth without overflow: ttl*10 overflows above 29 years.
	tenth := ttl/100*LeaseMarginPercent + ttl%100*LeaseMarginPercent/100
	return min(max(tenth, LeaseMarginMin), ttl)
}

// lease is the shared state of one holding.
type lease struct {
	key    string
	origin time.Time // the clock until is counted from
	// The deadline in ns since origin, for a check that reads the clock without
	// the mutex (leaseContext.Err).
	until atomic.Int64

	mu      sync.Mutex
	rule    leaseRule
	ttl     time.Duration // the holder's TTL: the last one it asked for
	ended   bool
	lastErr error // the last renewal's error, cleared by an acknowledged one
	timer   *time.Timer
	cancel  context.CancelCauseFunc
	onLost  func(error) // told the loss, once; not for a release
}

// newLease starts the lease of a holding acquired by a request sent at sent: the
// context it returns is cancelled at the lease's deadline unless renewed, and its
// Err reads the clock.
func newLease(parent context.Context, key string, sent time.Time, ttl time.Duration,
	onLost func(error)) (*lease, context.Context) {
	inner, cancel := context.WithCancelCause(parent)
	now := time.Now()
	l := &lease{key: key, origin: now, rule: newLeaseRule(sent, ttl, now), ttl: ttl, cancel: cancel,
		onLost: onLost}
	l.mu.Lock()
	defer l.mu.Unlock()
	until := l.rule.deadline()
	l.until.Store(int64(until.Sub(l.origin)))
	l.timer = time.AfterFunc(time.Until(until), l.check)
	return l, &leaseContext{Context: inner, lease: l}
}

// moved takes a new deadline after the writes changed, with l.mu held: earlier or
// later, the timer follows it.
func (l *lease) moved() {
	if l.ended {
		return
	}
	until := l.rule.deadline()
	l.until.Store(int64(until.Sub(l.origin)))
	l.timer.Reset(time.Until(until))
}

// expired reports, without the mutex, whether the deadline passed at now.
func (l *lease) expired(now time.Time) bool {
	return now.Sub(l.origin) >= time.Duration(l.until.Load())
}

// poll ends the lease if its deadline passed: what the context's Err does before
// it answers.
func (l *lease) poll() {
	if l.expired(time.Now()) {
		l.check()
	}
}

// check runs at the deadline: the lease ends unless it was renewed meanwhile.
func (l *lease) check() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.rule.deadline()); left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(LeaseRanOut, nil)
}

// start records a write (a renewal, or an extend) of ttl sent now, which bounds
// the lease until it is answered: a shorter TTL shortens it at once. asked: the
// holder asked for ttl (an extend), which later renewals ask for too.
func (l *lease) start(ttl time.Duration, asked bool) *write {
	l.mu.Lock()
	defer l.mu.Unlock()
	if asked {
		l.ttl = ttl
	}
	w := l.rule.start(time.Now(), ttl)
	l.moved()
	return w
}

// acknowledged records that w was answered 1: the server held the lock. A reply
// that comes after the lease ran out changes nothing (once lost, a lock stays
// lost, so the work that stopped for it was right to). It reports whether the
// lease still holds.
func (l *lease) acknowledged(w *write) bool {
	l.mu.Lock()
	now := time.Now()
	if l.ended || !now.Before(l.rule.deadline()) {
		l.mu.Unlock()
		l.lose(LeaseRanOut, nil) // a no-op if it ended already
		return false
	}
	l.rule.acknowledge(w, now)
	l.lastErr = nil
	l.moved()
	l.mu.Unlock()
	return true
}

// abandoned records that w got no reply (err): it may still reach the server.
func (l *lease) abandoned(w *write, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rule.abandon(w)
	l.lastErr = err
	l.moved()
}

// refused records that w was answered with an error reply (err): it was not
// applied.
func (l *lease) refused(w *write, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rule.drop(w)
	l.lastErr = err
	l.moved()
}

// lose ends the lease for reason: the first ending stays.
func (l *lease) lose(reason Reason, err error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if reason == LeaseRanOut && err == nil {
		err = l.lastErr
	}
	cause := &LostError{Key: l.key, Reason: reason, Err: err}
	l.end(cause)
	l.mu.Unlock()
	if l.onLost != nil {
		l.onLost(cause)
	}
}

// release ends the lease because its holder released it.
func (l *lease) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.end(ErrReleased)
	}
}

// end, with l.mu held.
func (l *lease) end(cause error) {
	l.ended = true
	l.timer.Stop()
	l.cancel(cause)
	l.until.Store(math.MaxInt64) // the context says it now: no more checks
}

// state is the lease as of now: the holder's TTL, the deadline, and whether it is
// lost (ended, or past its deadline).
func (l *lease) state() (ttl time.Duration, validUntil time.Time, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	validUntil = l.rule.deadline()
	lost = l.ended || !time.Now().Before(validUntil)
	return l.ttl, validUntil, lost
}

// renewalDue is when the next renewal is due, by the lease rule.
func (l *lease) renewalDue() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rule.renewalDue()
}

// leaseContext is a lock's context: cancelled when the lease ends, and its Err
// (and every Value, which context.Cause goes through) first reads the clock, so
// that a check before a write says "lost" as soon as the deadline passed, whichever
// goroutine runs first after a pause. Done is the cancellation alone.
type leaseContext struct {
	context.Context
	lease *lease
}

func (c *leaseContext) Err() error {
	c.lease.poll()
	return c.Context.Err()
}

func (c *leaseContext) Value(key any) any {
	c.lease.poll()
	return c.Context.Value(key)
}

// workContext is the context Run gives the work: it ends with the caller's context
// or with the lock, and its Err (and Value) reads the lock's clock as the lock's
// context does, so that the work's own check before a write is as good as the
// lock's.
type workContext struct {
	context.Context
	lock   context.Context
	cancel context.CancelCauseFunc
}

func (c *workContext) Err() error {
	if c.lock.Err() != nil {
		c.cancel(context.Cause(c.lock))
	}
	return c.Context.Err()
}

func (c *workContext) Value(key any) any {
	_ = c.Err()
	return c.Context.Value(key)
}
