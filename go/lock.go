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
	kind   kind

	ctx   context.Context
	lease *lease

	mu      sync.Mutex
	backend Backend
	renewal *time.Timer // nil: not renewed
	stopped bool        // no renewal after this
}

// Key is the lock's key.
func (l *Lock) Key() string { return l.key }

// Owner is the owner id the lock is held under.
func (l *Lock) Owner() string { return l.owner }

// Token is the holding's fencing token: greater than every token the server
// handed out for this key before. Stamp every write the lock guards with it, and
// have the guarded resource refuse a token lower than the highest it has seen.
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
// TTL, minus [Margin]): before the server could grant the lock to anyone else, also
// when the network is cut or the server hangs. context.Cause says why: a
// [*LostError] (errors.Is(cause, ErrLockLost)) with its [Reason], or ErrReleased.
// It carries the values of the context the lock was acquired with, not its
// cancellation.
func (l *Lock) Context() context.Context { return l.ctx }

// TTL is the time to live the lock was acquired or last extended with.
func (l *Lock) TTL() time.Duration {
	_, ttl, _, _ := l.lease.state()
	return ttl
}

// ValidUntil is the lease's local deadline: the lock is safe to rely on until then
// (in the past once it is lost).
func (l *Lock) ValidUntil() time.Time {
	_, _, until, lost := l.lease.state()
	if now := time.Now(); lost && now.Before(until) {
		return now
	}
	return until
}

// Release ends the holding and stops its renewal. The lock's context is cancelled
// first, with cause ErrReleased. It returns ErrNotHeld if the server no longer held
// the lock for this owner (it expired or was deleted: the work may have been fenced
// off). If the release cannot be sent, the lock lapses with its TTL.
func (l *Lock) Release(ctx context.Context) error {
	l.stopRenewal()
	l.lease.release()
	released, err := l.locker.release(ctx, l)
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
// with it. It returns ErrNotHeld (and the lock is lost) if the server no longer
// holds it for this owner. Renewal does this on its own; Extend is for locks
// acquired WithoutRenewal, or to change the TTL.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	held, err := l.locker.extend(ctx, l, ms)
	if err != nil {
		return err
	}
	if !held {
		l.lease.lose(Refused, nil)
		return ErrNotHeld
	}
	l.lease.renewed(sent, ttl)
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
