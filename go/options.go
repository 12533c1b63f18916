package redislock

import (
	"fmt"
	"log/slog"
	"time"
)

// MaxMillis is the longest TTL or wait the server takes, in ms: 2^62 - 1.
const MaxMillis = 1<<62 - 1

// MaxPermits is the most permits a semaphore (Limit) may have: 2^31.
const MaxPermits = 1 << 31

// The client's protocol constants, the same in every client of the project
// (conformance/protocol.json).
const (
	// RenewalDivisor: a holding is renewed every TTL / RenewalDivisor.
	RenewalDivisor = 3
	// LeaseMarginPercent and LeaseMarginMin make the lease's margin ([Margin]).
	LeaseMarginPercent = 10
	LeaseMarginMin     = 50 * time.Millisecond
	// WaitMargin is how long past its wait a waiting acquire may go without an
	// answer before it is given up as unanswered: the server answers a wait that
	// runs out at its end, so the margin covers the round trip and a busy server,
	// and bounds the wait when the server hangs or the network drops everything.
	WaitMargin = time.Second
	// WithdrawAfterTimeout bounds the withdrawal after a request that got no
	// answer: the server hangs or the path is cut, and waiting long for this reply
	// would only push the give-up past its bound.
	WithdrawAfterTimeout = 100 * time.Millisecond
	// ReleaseLimit bounds a release, an extend, and the withdrawal of a cancelled
	// or failed acquire (the lock then lapses with its TTL).
	ReleaseLimit = time.Second
	// ControlLimit bounds a connect, the backend probe, an acquire that does not
	// wait, and Info.
	ControlLimit = 2 * time.Second
)

// Option configures a [Locker].
type Option func(*Locker)

// WithBackend uses backend b only (Auto, the default: the one the server offers).
// The first call checks that the server has it, and fails otherwise, saying what
// to do.
func WithBackend(b Backend) Option {
	return func(l *Locker) { l.forced = b }
}

// WithLogger sends the locker's events to logger: "lock acquired" and "lock
// released" (Debug), "lock renewal failed" and "lock lost" (Warn), with key,
// owner and token. Without it the locker logs nothing.
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) {
		if logger != nil {
			l.log = logger
		}
	}
}

// AcquireOption shapes one acquire.
type AcquireOption func(*request)

// WaitFor waits up to d for a busy lock, in the server's FIFO queue (rounded up to
// whole milliseconds; 0 waits not at all). Without it, [Locker.Acquire] waits until
// its context ends.
func WaitFor(d time.Duration) AcquireOption {
	return func(r *request) {
		r.wait = d
		r.waitSet = true
	}
}

// Shared asks for a shared holding (a read lock): granted beside other shared
// holdings, never beside an exclusive one (a write lock: the default). Each holding
// has its own lease and token.
func Shared() AcquireOption {
	return func(r *request) { r.shared = true }
}

// Limit asks for one of n permits of a counting semaphore: a shared holding granted
// only while fewer than n owners hold the key. From 1 to [MaxPermits]. The limit
// belongs to this request, not to the key.
func Limit(n int64) AcquireOption {
	return func(r *request) {
		r.shared = true
		r.limit = n
		r.limitSet = true
	}
}

// WithOwner acquires under owner id (1 to 256 bytes) instead of a fresh one. The same
// owner acquiring again refreshes its holding and gets the same token.
func WithOwner(id string) AcquireOption {
	return func(r *request) {
		r.owner = id
		r.ownerGiven = true
	}
}

// WithoutRenewal holds the lock for its TTL only: no renewal in the background
// (extend it with [Lock.Extend]). Its context still ends at the lease's deadline.
func WithoutRenewal() AcquireOption {
	return func(r *request) { r.noRenewal = true }
}

// request is what one acquire asks for.
type request struct {
	key        string
	ttl        time.Duration
	ttlMs      int64
	owner      string
	ownerGiven bool
	shared     bool
	limit      int64
	limitSet   bool
	wait       time.Duration
	waitSet    bool
	noRenewal  bool
}

// kind is a holding's kind as the protocol names it.
type kind struct {
	shared bool
	limit  int64 // 0: none
}

func (r *request) kind() kind { return kind{shared: r.shared, limit: r.limit} }

func newRequest(key string, ttl time.Duration, opts []AcquireOption) (*request, error) {
	r := &request{key: key, ttl: ttl}
	for _, opt := range opts {
		opt(r)
	}
	var err error
	if r.ttlMs, err = ttlMillis(ttl); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: the key must not be empty", ErrInvalidArgument)
	}
	if r.limitSet && (r.limit < 1 || r.limit > MaxPermits) {
		return nil, fmt.Errorf("%w: limit %d: a semaphore has from 1 to %d permits", ErrInvalidArgument, r.limit,
			int64(MaxPermits))
	}
	if r.ownerGiven && (r.owner == "" || len(r.owner) > 256) {
		return nil, fmt.Errorf("%w: an owner id has from 1 to 256 bytes, not %d", ErrInvalidArgument, len(r.owner))
	}
	if r.waitSet {
		if r.wait < 0 {
			return nil, fmt.Errorf("%w: wait of %v: must not be negative", ErrInvalidArgument, r.wait)
		}
		if _, err := millis(r.wait, "wait"); err != nil {
			return nil, err
		}
	}
	if !r.ownerGiven {
		r.owner = FreshOwner()
	}
	return r, nil
}

// millis is d in whole milliseconds, rounded up (so 0.3 ms is 1 ms, never 0).
func millis(d time.Duration, what string) (int64, error) {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	if d < 0 || int64(ms) > MaxMillis {
		return 0, fmt.Errorf("%w: %s of %v is out of range: at most %d ms", ErrInvalidArgument, what, d,
			int64(MaxMillis))
	}
	return int64(ms), nil
}

// ttlMillis is a TTL in whole milliseconds, rounded up, checked before sending.
func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: ttl must be positive: a lock of %v would be gone before it is granted",
			ErrInvalidArgument, ttl)
	}
	return millis(ttl, "ttl")
}
