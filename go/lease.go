package redislock

import (
	"context"
	"sync"
	"time"
)

// The holder's side of a lock: a lease with a local deadline.
//
// The server counts a lock's TTL from the moment it runs the acquire or extend,
// which is after the client sent it. So the client knows the lock is the server's to
// keep until at least *send time + TTL*, whatever happened to the reply. The lease
// ends a margin earlier, for the two clocks' drift and for the wake-up of whoever
// waits on the signal: [Margin] is 10% of the TTL, at least 50 ms. The lock's
// context is cancelled at that deadline by a timer of its own, whatever the
// renewals are doing, so the holder hears of the loss before the server could grant
// the lock to anyone else, also when no reply ever comes back (a partition, a hung
// server).
//
// What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
// SIGSTOP, a suspended VM) between checking the context and writing; a local clock
// that runs more than 10% slow against the server's. Fencing tokens cover those.

// Margin is how much earlier than *send time + TTL* a lease ends: 10% of the TTL,
// at least 50 ms, and never more than the TTL (a lock of 50 ms or less has no lease
// time at all).
func Margin(ttl time.Duration) time.Duration {
	return min(max(ttl*LeaseMarginPercent/100, LeaseMarginMin), ttl)
}

// lease is the shared state of one holding.
type lease struct {
	key string

	mu         sync.Mutex
	sent       time.Time // when the last acknowledged acquire or extend was sent
	ttl        time.Duration
	validUntil time.Time
	ended      bool
	lastErr    error // the last renewal's error, cleared by an acknowledged one
	timer      *time.Timer
	cancel     context.CancelCauseFunc
	onLost     func(error) // told the loss, once; not for a release
}

func deadline(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - Margin(ttl))
}

// newLease starts the lease of a holding acquired by a request sent at sent: the
// context ctx it returns is cancelled at the lease's deadline unless renewed.
func newLease(parent context.Context, key string, sent time.Time, ttl time.Duration,
	onLost func(error)) (*lease, context.Context) {
	ctx, cancel := context.WithCancelCause(parent)
	l := &lease{key: key, sent: sent, ttl: ttl, validUntil: deadline(sent, ttl), cancel: cancel, onLost: onLost}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(l.validUntil), l.check)
	return l, ctx
}

// check runs at the deadline: the lease ends unless it was renewed meanwhile.
func (l *lease) check() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.validUntil); left > 0 {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(LeaseRanOut, nil)
}

// renewed records an acknowledged acquire or extend sent at sent with ttl. A reply
// to an older request than the one the lease is counted from changes nothing, and
// neither does one that comes after the lease ran out: once lost, a lock stays lost,
// so the work that stopped for it was right to. It reports whether the deadline
// moved.
func (l *lease) renewed(sent time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || sent.Before(l.sent) || !time.Now().Before(l.validUntil) {
		return false
	}
	l.sent, l.ttl, l.validUntil, l.lastErr = sent, ttl, deadline(sent, ttl), nil
	l.timer.Reset(time.Until(l.validUntil))
	return true
}

// failed records a renewal's error; the lease may still hold.
func (l *lease) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastErr = err
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
}

// state is the lease as of now: when its last acknowledged request was sent, its
// TTL and deadline, and whether it is lost (ended, or past its deadline).
func (l *lease) state() (sent time.Time, ttl time.Duration, validUntil time.Time, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lost = l.ended || !time.Now().Before(l.validUntil)
	return l.sent, l.ttl, l.validUntil, lost
}
