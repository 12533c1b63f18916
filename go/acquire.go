package redislock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// TryAcquire takes the lock at key for ttl if it is free, without waiting:
// ErrNotObtained if others hold it. It is bounded by [ControlLimit]. A reply lost to
// a broken connection is asked for once more as the same owner, who gets the same
// token back if the lost try won; if the try still fails, the fresh owner is
// released, so no lock is left held by an owner nobody knows.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	r, err := newRequest(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, r, 0)
}

// Acquire takes the lock at key for ttl, waiting for it in the server's FIFO
// queue while others hold it: for the WaitFor option's duration, else until ctx
// ends. ErrNotObtained if the wait ran out with the lock still held by others.
//
// A wait runs on a connection of its own and is bounded by its duration plus
// [WaitMargin] also when the server hangs or the network drops everything (then an
// [*UnansweredError]). When ctx is cancelled mid-wait, the wait ends at once and
// leaves nothing behind: its queue place is withdrawn, and a grant that crossed the
// cancellation is released. With a deadline on ctx, the server's wait ends a little
// before it (a tenth, at most 100 ms), so that a busy lock answers ErrNotObtained
// in time and only a server that does not answer runs into the deadline.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	r, err := newRequest(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	wait := time.Duration(-1) // without limit
	if r.waitSet {
		wait = r.wait
	}
	if until, ok := ctx.Deadline(); ok {
		left := time.Until(until)
		left -= min(left/10, 100*time.Millisecond)
		if wait < 0 || left < wait {
			wait = max(left, time.Millisecond)
		}
	}
	return l.acquire(ctx, r, wait)
}

// acquire asks for r, waiting for wait (0: not at all, negative: without limit).
func (l *Locker) acquire(ctx context.Context, r *request, wait time.Duration) (*Lock, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	b, err := l.Backend(ctx)
	if err != nil {
		return nil, err
	}
	lock, err := l.attempt(ctx, r, b, wait)
	if libraryMissing(err) {
		// The backend found earlier is gone (the library deleted or lost in a
		// restart): the call did not run. Find out what the server has now.
		l.forget(b)
		if b, err = l.Backend(ctx); err != nil {
			return nil, err
		}
		lock, err = l.attempt(ctx, r, b, wait)
	}
	return lock, err
}

func (l *Locker) attempt(ctx context.Context, r *request, b Backend, wait time.Duration) (*Lock, error) {
	switch {
	case wait == 0:
		return l.try(ctx, r, b)
	case b.library():
		return l.waitLibrary(ctx, r, b, wait)
	default:
		return l.waitModule(ctx, r, wait)
	}
}

func (r *request) acquireArgs() []any {
	return append([]any{r.owner, r.ttlMs}, kindArgs(r.shared, r.limit)...)
}

func (l *Locker) try(ctx context.Context, r *request, b Backend) (*Lock, error) {
	sent := time.Now()
	reply, err := l.send(ctx, ControlLimit, b, "lock_acquire", r.key, r.acquireArgs()...)
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotObtained
	case err != nil && (serverError(err) || libraryMissing(err)):
		return nil, err
	case err != nil:
		answered := l.withdraw(r, b, false, withdrawBound(ctx, err))
		return nil, l.failure(ctx, r, err, ControlLimit, answered)
	}
	return l.granted(ctx, r, b, reply, sent)
}

// waitModule is LOCK.ACQUIRE … WAIT ms: one command that blocks in the server, on
// a connection of its own.
func (l *Locker) waitModule(ctx context.Context, r *request, wait time.Duration) (*Lock, error) {
	args := append([]any{"LOCK.ACQUIRE", r.key}, r.acquireArgs()...)
	var waitMs int64 // 0: without limit
	if wait > 0 {
		waitMs, _ = millis(wait, "wait") // checked by newRequest, or below a deadline
	}
	args = append(args, "WAIT", waitMs)
	bounded, cancel := bound(ctx, wait)
	defer cancel()
	var (
		d     *dedicated
		reply any
		err   error
		sent  time.Time
	)
	for tries := 0; tries < 2; tries++ {
		if d, err = l.conns.get(bounded, r.key); err != nil {
			return nil, l.failure(ctx, r, err, waitBound(wait), false)
		}
		sent = time.Now()
		reply, err = d.do(bounded, args...)
		l.conns.done(d, err)
		if !moved(err) {
			break
		}
		l.conns.reroute(ctx) // a Cluster slot moved: the command did not run
	}
	switch {
	case errors.Is(err, redis.Nil):
		return nil, ErrNotObtained
	case err != nil && serverError(err):
		return nil, err
	case err != nil:
		// Closing the connection took the waiter out of the server's queue; a
		// grant that crossed the close is released.
		answered := l.withdraw(r, Module, false, withdrawBound(ctx, err))
		return nil, l.failure(ctx, r, err, waitBound(wait), answered)
	}
	if time.Since(sent) > Margin(r.ttl) {
		// Granted after a wait: the server counts the TTL from the grant, the lease
		// from the send, which may have run out already. A prompt extend brings the
		// lease up to date; if it fails, the shorter lease stays.
		again := time.Now()
		held, err := l.send(ctx, ReleaseLimit, Module, "lock_extend", r.key, r.owner, r.ttlMs)
		if err == nil && held == int64(1) {
			sent = again
		}
	}
	return l.granted(ctx, r, Module, reply, sent)
}

// waitLibrary is the library's waiting protocol (docs/PROTOCOL.md): lock_wait (a
// place in the server's queue, or the lock), BLPOP on the waiter's grant list until
// the wake_ms the library named, again, until granted or the wait's end, when
// lock_cancel gives the place up. No call is retried on its own: a driver that
// silently tries again hides a lapsed place.
//
// Each step has a bound of its own, also in a wait without limit: a lock_wait
// [ControlLimit] (it does not block), a BLPOP its block and [WaitMargin]. So a path
// that goes dead (a partition, a hung server) ends the wait with an
// [*UnansweredError] within a step's bound, instead of leaving it pending while its
// place lapses in the server.
func (l *Locker) waitLibrary(ctx context.Context, r *request, b Backend, wait time.Duration) (*Lock, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	bounded, cancel := bound(ctx, wait)
	defer cancel()
	d, err := l.conns.get(bounded, r.key)
	if err != nil {
		return nil, l.failure(ctx, r, err, waitBound(wait), false)
	}
	// lockWait and blpop are the steps, on d, each within its bound.
	lockWait := func() (any, error) {
		step, cancel := context.WithTimeout(bounded, ControlLimit)
		defer cancel()
		return callOn(step, d, b, "lock_wait", r.key, r.acquireArgs()...)
	}
	blpop := func(limit time.Duration, list string, ms int64) error {
		step, cancel := context.WithTimeout(bounded, limit)
		defer cancel()
		_, err := d.do(step, "BLPOP", list, fmt.Sprintf("%d.%03d", ms/1000, ms%1000))
		return err
	}
	// failed ends the wait after a step of limit failed with err.
	failed := func(err error, limit time.Duration) error {
		if bounded.Err() != nil {
			limit = waitBound(wait) // the wait's own bound passed
		}
		return l.waitFailed(ctx, d, r, b, err, limit)
	}
	for first := true; ; first = false {
		sent := time.Now()
		reply, err := lockWait()
		if first && moved(err) {
			// A Cluster slot moved before anything ran: once more, on its new node.
			l.conns.done(d, err)
			l.conns.reroute(ctx)
			if d, err = l.conns.get(bounded, r.key); err != nil {
				return nil, l.failure(ctx, r, err, waitBound(wait), false)
			}
			sent = time.Now()
			reply, err = lockWait()
		}
		if err != nil {
			return nil, failed(err, ControlLimit)
		}
		token, wakeMs, list, err := readWait(reply)
		if err != nil {
			l.conns.done(d, nil)
			l.withdraw(r, b, true, ReleaseLimit)
			return nil, err
		}
		if token > 0 {
			l.conns.done(d, nil)
			return l.granted(ctx, r, b, token, sent)
		}
		// At most one place lease, the library's own bound on wake_ms, so that
		// the step's bound is one the client knows whatever the reply says.
		block := min(millisDuration(max(wakeMs, 1)), placeLease)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				// Leaves the queue, and ends a grant pushed but not collected.
				cancelCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseLimit)
				_, err := callOn(cancelCtx, d, b, "lock_cancel", r.key, r.owner)
				cancel()
				l.conns.done(d, err)
				return nil, ErrNotObtained
			}
			block = min(block, left)
		}
		// Whatever BLPOP returns (a token, a wake-up, nothing), the next lock_wait
		// says whether the owner holds: the popped value is not trusted alone.
		// At least 2 ms: Redis 6.2 reads `BLPOP list 0.001` as 0, which blocks
		// without limit (it multiplies the seconds by 1000 in floating point).
		ms := max(block.Milliseconds(), 2)
		limit := addSaturating(time.Duration(ms)*time.Millisecond, WaitMargin)
		if err := blpop(limit, list, ms); err != nil && !errors.Is(err, redis.Nil) {
			return nil, failed(err, limit)
		}
	}
}

// placeLease is the lease of a place in the library's queue when the waiter names
// none (docs/PROTOCOL.md): a waiter calls lock_wait again within it.
const placeLease = 2 * time.Second

// waitFailed ends a library wait whose call on d failed with err: an error reply
// changed nothing; anything else (a cut, a timeout, a cancellation) is withdrawn.
// bound: the bound that passed, if the call was not answered in time.
func (l *Locker) waitFailed(ctx context.Context, d *dedicated, r *request, b Backend, err error,
	bound time.Duration) error {
	l.conns.done(d, err)
	if serverError(err) {
		if !libraryMissing(err) {
			l.withdraw(r, b, true, ReleaseLimit)
		}
		return err
	}
	answered := l.withdraw(r, b, true, withdrawBound(ctx, err))
	return l.failure(ctx, r, err, bound, answered)
}

// readWait reads lock_wait's reply: [token, wake_ms, grant list].
func readWait(reply any) (token, wakeMs int64, list string, err error) {
	parts, ok := reply.([]any)
	if ok && len(parts) == 3 {
		token, ok1 := parts[0].(int64)
		wakeMs, ok2 := parts[1].(int64)
		list, ok3 := parts[2].(string)
		if ok1 && ok2 && ok3 {
			return token, wakeMs, list, nil
		}
	}
	return 0, 0, "", fmt.Errorf("redislock: lock_wait answered %v, not [token, wake_ms, list]", reply)
}

// bound is ctx bounded by a wait and its margin (a negative wait: ctx alone).
func bound(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, addSaturating(wait, WaitMargin))
}

// waitBound is how long an acquire that waits for wait may go unanswered: the wait
// and its margin; for one that does not wait (or a wait without limit, whose steps
// have bounds of their own), ControlLimit.
func waitBound(wait time.Duration) time.Duration {
	if wait <= 0 {
		return ControlLimit
	}
	return addSaturating(wait, WaitMargin)
}

// addSaturating is a + b for non-negative durations, at most the longest Duration
// (a wait of 292 years and its margin).
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// millisDuration is ms milliseconds, at most the longest Duration.
func millisDuration(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// withdrawBound is how long the withdrawal after err may take: short when the
// server did not answer within the wait's own bound, longer when the caller's
// context ended first (the server may be answering: its answer says so).
func withdrawBound(ctx context.Context, err error) time.Duration {
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) {
		return WithdrawAfterTimeout
	}
	return ReleaseLimit
}

func isTimeout(err error) bool {
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
}

// withdraw takes back what a request cut short may have left: its queue place and a
// grant not collected (lock_cancel, for a library wait), and, for a fresh owner
// nobody else knows, a grant already made (a release). Bounded by limit; the rest
// lapses with its lease. It reports whether the server answered.
func (l *Locker) withdraw(r *request, b Backend, queued bool, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	answered := false
	if queued {
		_, err := l.send(ctx, limit, b, "lock_cancel", r.key, r.owner)
		if err != nil && !serverError(err) {
			return false
		}
		answered = true
	}
	if !r.ownerGiven {
		_, err := l.send(ctx, limit, b, "lock_release", r.key, r.owner)
		answered = err == nil || serverError(err)
	}
	return answered
}

// failure is the error of an acquire whose request got no usable answer; bound:
// the bound that passed, if it was not answered in time. answered: the withdrawal
// after it was answered, so the server is there.
func (l *Locker) failure(ctx context.Context, r *request, err error, bound time.Duration, answered bool) error {
	cause := context.Cause(ctx)
	if cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
		return cause // cancelled by the caller
	}
	if cause != nil && answered {
		// The caller's deadline came while the server's wait was still running
		// out (a library wait's BLPOP times out up to 1000/hz ms late): the server
		// answers, and the lock stayed busy until the deadline.
		return fmt.Errorf("%w until the context's deadline (%w)", ErrNotObtained, cause)
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return &UnansweredError{Key: r.key, Bound: bound, Err: err}
	}
	return fmt.Errorf("redislock: acquiring %q: %w", r.key, err)
}

// granted makes the Lock of a grant whose request was sent at sent.
func (l *Locker) granted(ctx context.Context, r *request, b Backend, reply any, sent time.Time) (*Lock, error) {
	token, ok := reply.(int64)
	if !ok || token <= 0 {
		l.withdraw(r, b, false, ReleaseLimit)
		return nil, fmt.Errorf("redislock: the acquire answered %v, not a token", reply)
	}
	lock := &Lock{locker: l, key: r.key, owner: r.owner, ownerGiven: r.ownerGiven, token: token, kind: r.kind(),
		backend: b, autoRenew: !r.noRenewal}
	lock.lease, lock.ctx = newLease(context.WithoutCancel(ctx), r.key, sent, r.ttl, func(cause error) {
		l.log.Warn("lock lost", "key", r.key, "owner", r.owner, "token", token, "cause", cause)
	})
	l.log.Debug("lock acquired", "key", r.key, "owner", r.owner, "token", token, "backend", b.String())
	lock.scheduleRenewal()
	return lock, nil
}
