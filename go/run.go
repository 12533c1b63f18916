package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Run acquires the lock at key for ttl (as [Locker.Acquire], waiting as opts say),
// runs work while renewing it, and releases it afterwards, also when work panics.
// The context work gets ends when ctx does or when the lock is lost; context.Cause
// says which. Its Err reads the lock's clock as [Lock.Context]'s does: check it
// right before each write the lock guards.
//
// Run returns ErrNotObtained (or the acquire's error) without running work, else
// work's error. If work returned nil but the lock was lost before it did, Run
// returns the loss (errors.Is(err, ErrLockLost)): the work ran, and its writes
// after the loss were fenced off. A release that fails is logged; the lock then
// lapses with its TTL.
func (l *Locker) Run(ctx context.Context, key string, ttl time.Duration,
	work func(ctx context.Context, lock *Lock) error, opts ...AcquireOption) (err error) {
	lock, err := l.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	inner, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lock.Context(), func() { cancel(context.Cause(lock.Context())) })
	workCtx := &workContext{Context: inner, lock: lock.Context(), cancel: cancel}
	defer func() {
		stop()
		cancel(nil)
		lost := context.Cause(lock.Context())
		releaseCtx, done := context.WithTimeout(context.WithoutCancel(ctx), ReleaseLimit)
		defer done()
		released := lock.Release(releaseCtx)
		if err == nil && lost == nil && errors.Is(released, ErrNotHeld) {
			// The server no longer held it at the end: lost in the last moments.
			lost = &LostError{Key: key, Reason: Refused}
		}
		if err == nil && lost != nil {
			err = fmt.Errorf("redislock: the work under %q finished, but the lock was lost before it did: %w",
				key, lost)
		}
	}()
	return work(workCtx, lock)
}
