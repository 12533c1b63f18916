package redislock

import (
	"context"
	"fmt"
	"time"
)

// Renewal: a held lock is extended at a third of its TTL, on a connection of its
// own, each attempt bounded by what is left of the lease; a failed attempt is tried
// again shortly, until the lease runs out. The loss signal does not depend on it:
// the lease's own timer cancels the lock's context at the deadline, whatever a
// renewal is stuck on. An extend answered 0 ends the lease at once.

// period is how often a lock of ttl is renewed.
func period(ttl time.Duration) time.Duration {
	return max(ttl/RenewalDivisor, time.Millisecond)
}

// retryDelay is the pause before another try after a failed renewal: short, so
// that a blip costs little of the lease.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(period(ttl)/4, 10*time.Millisecond), 250*time.Millisecond)
}

// scheduleRenewal arms the next renewal at at. A timer, not a goroutine per lock:
// a lock released before its first renewal costs nothing more.
func (l *Lock) scheduleRenewal(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if l.renewal == nil {
		l.renewal = time.AfterFunc(time.Until(at), l.renew)
		return
	}
	l.renewal.Reset(time.Until(at))
}

// renew is one renewal attempt, run by the renewal timer.
func (l *Lock) renew() {
	_, ttl, validUntil, lost := l.lease.state()
	if lost || l.ctx.Err() != nil {
		l.lease.lose(LeaseRanOut, nil) // a no-op if it ended already
		return
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return
	}
	attempt, cancel := context.WithDeadline(l.ctx, validUntil)
	sent := time.Now()
	held, err := l.locker.renewOnce(attempt, l, ms)
	cancel()
	switch {
	case l.ctx.Err() != nil:
		return // released, or lost, meanwhile
	case err == nil && held:
		l.lease.renewed(sent, ttl)
		l.scheduleRenewal(sent.Add(period(ttl)))
	case err == nil:
		l.lease.lose(Refused, nil)
	default:
		l.lease.failed(err)
		l.locker.log.Warn("lock renewal failed", "key", l.key, "owner", l.owner, "token", l.token,
			"remaining", time.Until(validUntil).Round(time.Millisecond), "error", err)
		l.scheduleRenewal(time.Now().Add(retryDelay(ttl)))
	}
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
	return l.holderCall(ctx, lock, "lock_extend", lock.owner, ttlMs)
}

// release is LOCK.RELEASE (or lock_release) of lock.
func (l *Locker) release(ctx context.Context, lock *Lock) (bool, error) {
	return l.holderCall(ctx, lock, "lock_release", lock.owner)
}

// holderCall is a release or an extend by lock's holder, answered 1 or 0, within
// ReleaseLimit; through the scripts path when the library is gone (see renewOnce).
func (l *Locker) holderCall(ctx context.Context, lock *Lock, function string, args ...any) (bool, error) {
	b := lock.Backend()
	reply, err := l.send(ctx, ReleaseLimit, b, function, lock.key, args...)
	if libraryMissing(err) {
		l.forget(b)
		if b == Module {
			return false, nil // no module, no module's lock
		}
		lock.setBackend(Scripts)
		reply, err = l.send(ctx, ReleaseLimit, Scripts, function, lock.key, args...)
	}
	if err != nil {
		return false, err
	}
	return readFlag(reply)
}

// readFlag reads an integer reply: 1 is yes.
func readFlag(reply any) (bool, error) {
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("redislock: expected 1 or 0, got %v", reply)
	}
	return n == 1, nil
}
