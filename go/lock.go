package redislock

import (
	"context"
	"sync"
	"time"
)

// Lock is one holding of a lock: its key, owner, fencing token and lease. Its
// [Lock.Context] is cancelled when the lock is lost or released. Safe for
// concurrent use.
type Lock struct {
	locker *Locker
	key    string
	owner  string
	token  int64
	// ownerGiven: acquired WithOwner, an id others may hold under too.
	ownerGiven bool
	kind       kind

	ctx   context.Context
	lease *lease

	mu        sync.Mutex
	backend   Backend
	autoRenew bool        // renewed in the background (not WithoutRenewal)
	renewal   *time.Timer // nil: not armed yet
	renewing  bool        // a renewal is under way: it arms the next itself
	stopped   bool        // no renewal after this
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Owner is the owner id the lock is held under.
func (l *Lock) Owner() string { return l.owner }

// Token is the holding's fencing token: greater than every token the server
// handed out for this key before. Stamp every write the lock guards with it, and
// have the guarded resource refuse a token lower than the highest it has seen:
// [Lock.Guard] does it for a write to Redis, [Lock.FencePostgres] for PostgreSQL.
// Tokens are below 2^53.
func (l *Lock) Token() int64 { return l.token }

// Backend is the backend the lock was acquired on; its renewals and its release
// go the same way.
func (l *Lock) Backend() Backend {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.backend
}

// Context is cancelled when the lock is lost, at the latest at the lease's local
// deadline (the send time of the last acknowledged acquire or renewal, plus the
// TTL, minus [Margin]; earlier while a write with a shorter TTL may still be the
// last one the server applies): before the server could grant the lock to anyone
// else, also when the network is cut or the server hangs. context.Cause says why:
// a [*LostError] (errors.Is(cause, ErrLockLost)) with its [Reason], or ErrReleased.
// It carries the values of the context the lock was acquired with, not its
// cancellation.
//
// Check it right before each write the lock guards: Err reads the clock when it is
// called, so it says the lock is lost once the deadline passed, also when this
// goroutine is the first to run after the process was stopped (a GC pause,
// SIGSTOP), before the lease's own timer:
//
//	if err := lock.Context().Err(); err != nil {
//		return context.Cause(lock.Context()) // lost (or released): do not write
//	}
//	write(lock.Token())
//
// Done is closed by a timer at the deadline: select on it to stop waiting work.
func (l *Lock) Context() context.Context { return l.ctx }

// TTL is the time to live the holder last asked for: the acquire's, or the last
// extend's. Renewals ask for it.
func (l *Lock) TTL() time.Duration {
	ttl, _, _ := l.lease.state()
	return ttl
}

// ValidUntil is the lease's local deadline: the lock is safe to rely on until then
// (in the past once it is lost).
func (l *Lock) ValidUntil() time.Time {
	_, until, lost := l.lease.state()
	if now := time.Now(); lost && now.Before(until) {
		return now
	}
	return until
}

// Release ends the holding and stops its renewal. The lock's context is cancelled
// first, with cause ErrReleased. It returns ErrNotHeld if the server no longer held
// the lock for this owner (it expired or was deleted: the work may have been fenced
// off). If the release cannot be sent, the lock lapses with its TTL.
//
// A release whose reply is lost to a broken connection is sent once more on a
// fresh one; the server, which ran the first, answers that one 0. That is a
// release, not a loss, as long as the lease still held when it was sent again:
// Release then returns nil (ErrNotHeld if the lease had run out before). Not for a
// lock acquired WithOwner: another holder under the same id may have acquired
// since the first release, and a second would end its holding; Release then
// returns the connection's error.
func (l *Lock) Release(ctx context.Context) error {
	l.stopRenewal()
	_, validUntil, lost := l.lease.state() // before the release ends the lease
	l.lease.release()
	released, resent, err := l.locker.release(ctx, l)
	if err == nil && !released && !resent.IsZero() && !lost && resent.Before(validUntil) {
		released = true // the first one did it: its reply was lost
	}
	if err != nil {
		l.locker.log.Warn("lock release failed", "key", l.key, "owner", l.owner, "token", l.token, "error", err)
		return err
	}
	l.locker.log.Debug("lock released", "key", l.key, "owner", l.owner, "token", l.token, "held", released)
	if !released {
		return ErrNotHeld
	}
	return nil
}

// Extend sets the remaining TTL of the holding to ttl from now, and the lease
// with it; later renewals ask for ttl, at a third of it. It returns ErrNotHeld
// (and the lock is lost) if the server no longer holds it for this owner. Renewal
// does this on its own; Extend is for locks acquired WithoutRenewal, or to change
// the TTL.
//
// While an extend to a shorter TTL is on its way, and while a renewal sent with
// the old, shorter TTL may still reach the server after an extend to a longer one,
// the lease counts the shorter TTL: the server's expiry is set by whichever it
// applies last.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	w := l.lease.start(ttl, true)
	held, err := l.locker.extend(ctx, l, ms)
	switch {
	case err != nil && serverError(err):
		l.lease.refused(w, err)
		return err
	case err != nil:
		l.lease.abandoned(w, err)
		return err
	case !held:
		l.lease.lose(Refused, nil)
		return ErrNotHeld
	}
	l.lease.acknowledged(w)
	l.scheduleRenewal()
	return nil
}

func (l *Lock) stopRenewal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.renewal != nil {
		l.renewal.Stop()
	}
}
