package redislock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotObtained is the answer of an acquire that did not get the lock: it is held
// by others (and stayed so until the wait ran out, for a waiting acquire). It is
// the normal outcome of a busy lock, not a failure of the server or the network.
var ErrNotObtained = errors.New("redislock: not obtained: the lock is held by others")

// ErrLockLost matches (errors.Is) every [LostError]: the holder no longer holds
// the lock, or can no longer be sure it does.
var ErrLockLost = errors.New("redislock: the lock is lost")

// ErrReleased is context.Cause of a lock's context once its holder released it.
var ErrReleased = errors.New("redislock: the lock was released")

// ErrNotHeld is what a release or an extend gets when the server no longer holds
// the lock for this owner (it expired, was deleted, or another owner has it now).
// Not for a release sent again after its reply was lost while the lease held: the
// first one released it.
var ErrNotHeld = errors.New("redislock: the lock is not held by this owner")

// ErrInvalidArgument matches (errors.Is) an argument the server would refuse (a TTL
// of zero, a limit out of range, an empty owner), found before anything is sent.
var ErrInvalidArgument = errors.New("redislock: invalid argument")

// ErrUnanswered matches (errors.Is) every [UnansweredError].
var ErrUnanswered = errors.New("redislock: no answer from the server in time")

// ErrNoBackend matches (errors.Is) every [NoBackendError].
var ErrNoBackend = errors.New("redislock: no lock backend on this server")

// ErrFenced matches (errors.Is) every [FencedError]: a fenced write was refused.
var ErrFenced = errors.New("redislock: fenced: the write was refused")

// Reason says why a lock was lost.
type Reason int

const (
	// Refused: a renewal was answered 0, the server no longer holds the lock for
	// this owner (it expired there, was deleted, or the server lost it in a
	// restart).
	Refused Reason = iota + 1
	// LeaseRanOut: no renewal was acknowledged before the lease's local deadline
	// (the network is cut, the server hangs, or renewals failed).
	LeaseRanOut
	// Fenced: a write fenced with the lock's token was refused ([FencedError], in
	// Err): the server no longer holds the lock with that token, or a holder with a
	// greater token has written to the fenced store. A newer holder may exist.
	Fenced
)

// LostError is context.Cause of a lock's context once the lock is lost.
type LostError struct {
	Key    string
	Reason Reason
	// The last renewal's (or extend's) error, if it failed (for LeaseRanOut), the
	// error that showed the holding gone (for Refused after a server lost its lock
	// backend), or the [*FencedError] (for Fenced).
	Err error
}

func (e *LostError) Error() string {
	var text string
	switch e.Reason {
	case Refused:
		text = "a renewal was answered 0: the server no longer holds it for this owner"
	case Fenced:
		text = "a write fenced with its token was refused"
	default:
		text = "no renewal was acknowledged before the lease ran out"
	}
	if e.Err != nil {
		if e.Reason == LeaseRanOut {
			text += "; the last renewal failed"
		}
		text += ": " + e.Err.Error()
	}
	return fmt.Sprintf("redislock: lost the lock %q: %s", e.Key, text)
}

// Is makes errors.Is(err, ErrLockLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLockLost }

// Unwrap gives the last renewal's error.
func (e *LostError) Unwrap() error { return e.Err }

// UnansweredError is a request that got no answer within its bound: a wait plus
// [WaitMargin] (the server answers a wait that runs out at its end, so it hangs, or
// the network drops everything), or the connection's own timeout. What the request
// may have left in the server (a queue place, a grant to a fresh owner) was
// withdrawn, or lapses with its lease.
type UnansweredError struct {
	Key string
	// The bound that passed without an answer.
	Bound time.Duration
	Err   error
}

func (e *UnansweredError) Error() string {
	return fmt.Sprintf("redislock: no answer from the server for %q within %v: the server hangs or "+
		"the network drops everything; gave up, and withdrew the request (%v)", e.Key, e.Bound, e.Err)
}

// Is makes errors.Is(err, ErrUnanswered) true.
func (e *UnansweredError) Is(target error) bool { return target == ErrUnanswered }

// Unwrap gives the network's error.
func (e *UnansweredError) Unwrap() error { return e.Err }

// NoBackendError says that the server has neither the module nor the redislock
// library and refuses scripts (or that the backend asked for is missing), and why,
// for each.
type NoBackendError struct {
	Why []string
}

func (e *NoBackendError) Error() string {
	return "redislock: no lock backend on this server: load the library with `redis-lock functions load " +
		"--url URL` (or FUNCTION LOAD of lua/redislock.lua), or load the redis-lock module (" +
		strings.Join(e.Why, "; ") + ")"
}

// Is makes errors.Is(err, ErrNoBackend) true.
func (e *NoBackendError) Is(target error) bool { return target == ErrNoBackend }

// LibraryVersionError is a redislock library on the server whose version
// (lock_version) this client does not speak, or one too old for a call of this
// client (Lacks: lock_guard, on a library loaded before it existed).
type LibraryVersionError struct {
	Found    int64
	Min, Max int64
	// Lacks names the library call the server's library does not have, though its
	// version is in the range: it was loaded before the call came.
	Lacks string
}

func (e *LibraryVersionError) Error() string {
	if e.Lacks != "" {
		return fmt.Sprintf("redislock: the redislock library on the server (version %d) has no %s: it was "+
			"loaded before %s existed; load the library of this release with `redis-lock functions load "+
			"--url URL` (or FUNCTION LOAD REPLACE of lua/redislock.lua)", e.Found, e.Lacks, e.Lacks)
	}
	if e.Found > e.Max {
		return fmt.Sprintf("redislock: the redislock library on the server is version %d, newer than this "+
			"client accepts (%s): upgrade this client to one made for library version %d", e.Found,
			accepted(e.Min, e.Max), e.Found)
	}
	return fmt.Sprintf("redislock: the redislock library on the server is version %d, older than this "+
		"client accepts (%s): upgrade it with `redis-lock functions load --url URL`", e.Found,
		accepted(e.Min, e.Max))
}

// accepted is a range of library versions in words: "version 2", "versions 2 to 3".
func accepted(min, max int64) string {
	if min == max {
		return fmt.Sprintf("version %d", min)
	}
	return fmt.Sprintf("versions %d to %d", min, max)
}

// CheckLibraryVersion is nil for a library version this client speaks
// ([MinLibraryVersion] to [LibraryVersion]), else a [LibraryVersionError].
func CheckLibraryVersion(found int64) error {
	if found < MinLibraryVersion || found > LibraryVersion {
		return &LibraryVersionError{Found: found, Min: MinLibraryVersion, Max: LibraryVersion}
	}
	return nil
}

// FencedError is a write fenced with a lock's token that was refused, and nothing
// was written: in Redis, the token no longer holds the lock (a guarded command
// answered FENCED: the lock is free, or held with another token); in PostgreSQL, a
// holder with a greater token has written the resource's fence row. A newer
// holder may exist: stop the work, and roll back what the transaction wrote. A
// [Lock] whose write was fenced is lost (context.Cause: a [*LostError] with Reason
// Fenced, which wraps this error).
type FencedError struct {
	// Key is the lock's key (Redis) or the fenced resource (PostgreSQL).
	Key   string
	Token int64
	// Err is the server's FENCED reply (Redis); nil for PostgreSQL.
	Err error
}

func (e *FencedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("redislock: the guarded write was refused: %v (the lock is lost: stop the work)",
			e.Err)
	}
	return fmt.Sprintf("redislock: the PostgreSQL fence of %q refused token %d: a holder with a greater "+
		"token has written (roll back, and stop the work)", e.Key, e.Token)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Unwrap gives the server's FENCED reply.
func (e *FencedError) Unwrap() error { return e.Err }
