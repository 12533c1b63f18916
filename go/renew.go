package redislock

import (
	"context"
	"fmt"
	"time"
)

// Renewal: a held lock is extended at a third of its TTL (by the lease rule: a
// third of the way into the lease's earliest window, leaserule.go), with the TTL the
// holder last asked for, on a connection of its own, each attempt bounded by what is
// left of the lease; a failed attempt is tried again shortly, until the lease runs
// out. The loss signal does not depend on it: the lease's own timer cancels the
// lock's context at the deadline, whatever a renewal is stuck on. An extend answered
// 0 ends the lease at once. One renewal at a time: the one under way arms the next
// when it ends, from the lease as it is then (an Extend meanwhile included).

// period is how often a lock of ttl is renewed.
func period(ttl time.Duration) time.Duration {
	return max(ttl/RenewalDivisor, time.Millisecond)
}

// retryDelay is the pause before another try after a failed renewal: short, so
// that a blip costs little of the lease.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(period(ttl)/4, 10*time.Millisecond), 250*time.Millisecond)
}

// scheduleRenewal arms the next renewal when the lease says it is due, unless the
// lock is not renewed in the background or a renewal under way will arm it.
func (l *Lock) scheduleRenewal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.autoRenew || l.stopped || l.renewing {
		return
	}
	l.arm(l.lease.renewalDue())
}

// arm sets the renewal timer to at, with l.mu held. A timer, not a goroutine per
// lock: a lock released before its first renewal costs nothing more.
func (l *Lock) arm(at time.Time) {
	if l.renewal == nil {
		l.renewal = time.AfterFunc(time.Until(at), l.renew)
		return
	}
	l.renewal.Reset(time.Until(at))
}

// renew is one renewal attempt, run by the renewal timer; it arms the next one.
func (l *Lock) renew() {
	l.mu.Lock()
	if l.stopped || l.renewing {
		l.mu.Unlock()
		return
	}
	l.renewing = true
	l.mu.Unlock()
	retry := l.tryRenewal()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewing = false
	switch {
	case l.stopped || l.ctx.Err() != nil: // released or lost: no more
	case retry:
		ttl, _, _ := l.lease.state()
		l.arm(time.Now().Add(retryDelay(ttl)))
	default:
		l.arm(l.lease.renewalDue())
	}
}

// tryRenewal extends the holding once with the holder's TTL and tells the lease
// what came of it. It reports whether to try again soon (the attempt failed, the
// lease may still hold).
func (l *Lock) tryRenewal() (retry bool) {
	ttl, validUntil, lost := l.lease.state()
	if lost || l.ctx.Err() != nil {
		l.lease.lose(LeaseRanOut, nil) // a no-op if it ended already
		return false
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return false
	}
	attempt, cancel := context.WithDeadline(l.ctx, validUntil)
	defer cancel()
	w := l.lease.start(ttl, false)
	held, err := l.locker.renewOnce(attempt, l, ms)
	switch {
	case err == nil && held:
		l.lease.acknowledged(w)
		return false
	case err == nil:
		l.lease.lose(Refused, nil)
		return false
	case serverError(err):
		l.lease.refused(w, err)
	default:
		l.lease.abandoned(w, err)
	}
	if l.ctx.Err() != nil {
		return false // released, or lost, meanwhile
	}
	l.locker.log.Warn("lock renewal failed", "key", l.key, "owner", l.owner, "token", l.token,
		"remaining", time.Until(validUntil).Round(time.Millisecond), "error", err)
	return true
}

// renewOnce extends lock on a connection of its own. A server that lost the
// library (a restart without it, FUNCTION FLUSH, a failover to a node without it)
// answers ERR Function not found: the same library is then sent as a script
// (EVALSHA, loaded on NOSCRIPT), which extends the holding if the server still has
// it and answers 0 if not, at once rather than after retries until the deadline;
// and the locker finds out its backend again. A server without the module (a
// restart without it) cannot hold a module's lock: the lock is lost.
func (l *Locker) renewOnce(ctx context.Context, lock *Lock, ttlMs int64) (bool, error) {
	d, err := l.conns.get(ctx, lock.key)
	if err != nil {
		return false, err
	}
	b := lock.Backend()
	reply, err := callOn(ctx, d, b, "lock_extend", lock.key, lock.owner, ttlMs)
	if libraryMissing(err) {
		l.forget(b)
		if b == Module {
			l.conns.done(d, err)
			lock.lease.lose(Refused, err)
			return false, nil
		}
		lock.setBackend(Scripts)
		reply, err = callOn(ctx, d, Scripts, "lock_extend", lock.key, lock.owner, ttlMs)
	}
	l.conns.done(d, err)
	if err != nil {
		return false, err
	}
	return readFlag(reply)
}

func (l *Lock) setBackend(b Backend) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.backend = b
}

// extend is LOCK.EXTEND (or lock_extend) of lock.
func (l *Locker) extend(ctx context.Context, lock *Lock, ttlMs int64) (bool, error) {
	held, _, err := l.holderCall(ctx, lock, true, "lock_extend", lock.owner, ttlMs)
	return held, err
}

// release is LOCK.RELEASE (or lock_release) of lock, and when it was sent again
// after a reply lost to a broken connection (zero: it was not). Only a fresh
// owner's release is sent again: under an owner id the caller gave, another
// holder may have acquired since the first one released, and a second release
// would end its holding.
func (l *Locker) release(ctx context.Context, lock *Lock) (bool, time.Time, error) {
	return l.holderCall(ctx, lock, !lock.ownerGiven, "lock_release", lock.owner)
}

// holderCall is a release or an extend by lock's holder, answered 1 or 0, within
// ReleaseLimit; through the scripts path when the library is gone (see renewOnce).
// resend: whether a call whose reply was lost to a broken connection is sent again;
// resent: when it was (zero: it was not).
func (l *Locker) holderCall(ctx context.Context, lock *Lock, resend bool, function string,
	args ...any) (held bool, resent time.Time, err error) {
	b := lock.Backend()
	reply, resent, err := l.sendNoting(ctx, ReleaseLimit, b, resend, function, lock.key, args...)
	if libraryMissing(err) {
		l.forget(b)
		if b == Module {
			return false, time.Time{}, nil // no module, no module's lock
		}
		lock.setBackend(Scripts)
		reply, resent, err = l.sendNoting(ctx, ReleaseLimit, Scripts, resend, function, lock.key, args...)
	}
	if err != nil {
		return false, resent, err
	}
	held, err = readFlag(reply)
	return held, resent, err
}

// readFlag reads an integer reply: 1 is yes.
func readFlag(reply any) (bool, error) {
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("redislock: expected 1 or 0, got %v", reply)
	}
	return n == 1, nil
}
