package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Guard runs command (its name and arguments, as go-redis's Do takes them) on the
// lock's server only while the lock's token holds it: the server checks the token
// and runs the command in one step (LOCK.GUARD on the module, lock_guard on the
// library), so no expiry, release or grant to another holder comes between the
// check and the write. The reply is the command's, as go-redis gives it: Result,
// Text, Int64 …, redis.Nil for a nil reply, the command's own error reply.
//
// keys are every key the command touches. The library declares them to the server
// (Cluster routing, ACL key patterns) and refuses a command that touches a key not
// declared; the module finds them itself, but name them on every backend, so that
// the code runs on each. In a Cluster they must share the lock key's hash slot:
// hash tags, {job:1} for the lock and {job:1}:out for the data (a CROSSSLOT
// reply says so).
//
//	err := lock.Guard(ctx, []string{"{job:1}:out"}, "SET", "{job:1}:out", result).Err()
//	if errors.Is(err, redislock.ErrFenced) {
//		return err // the lock is lost: a newer holder may exist, and nothing was written
//	}
//
// When the server does not hold the lock with this token (it lapsed, was released,
// deleted, or is held by another holder), nothing runs, the error is a
// [*FencedError] (errors.Is(err, ErrFenced)), and the lock is lost at once: its
// context is cancelled, with a [*LostError] of Reason Fenced as the cause. A lock
// the client knows is lost or released already is refused before anything is
// sent, with the loss (errors.Is(err, ErrLockLost)) or ErrReleased. The command is
// sent once: a reply lost to a broken connection is not asked for again, as the
// command may have run. Bounded by [ControlLimit] (and ctx).
//
// A library loaded before lock_guard existed is a [*LibraryVersionError] whose
// Lacks is "lock_guard": load the library of this release.
func (l *Lock) Guard(ctx context.Context, keys []string, command ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, command...)
	reply, err := l.guard(ctx, keys, command)
	cmd.SetVal(reply)
	cmd.SetErr(err)
	return cmd
}

func (l *Lock) guard(ctx context.Context, keys []string, command []any) (any, error) {
	if len(command) == 0 {
		return nil, fmt.Errorf("%w: a guarded write needs a command", ErrInvalidArgument)
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if l.ctx.Err() != nil {
		return nil, fmt.Errorf("redislock: the guarded write under %q was not sent: %w", l.key,
			context.Cause(l.ctx))
	}
	b := l.Backend()
	reply, err := l.locker.sendGuard(ctx, b, l, keys, command)
	if b != Module && (libraryMissing(err) || lacksGuard(err)) {
		// Nothing ran: the library lacks lock_guard (loaded before it existed), or is
		// gone (a restart, FUNCTION FLUSH), when the scripts path has it.
		if tooOld := l.locker.libraryLacksGuard(ctx, b, l.key); tooOld != nil {
			return nil, tooOld
		}
		if b == Functions {
			l.locker.forget(b)
			l.setBackend(Scripts)
			reply, err = l.locker.sendGuard(ctx, Scripts, l, keys, command)
		}
	}
	switch {
	case err != nil && !serverError(err) && strings.Contains(err.Error(), "can't marshal"):
		return nil, fmt.Errorf("%w: a guarded command's argument: %v", ErrInvalidArgument, err) // not sent
	case err == nil || errors.Is(err, redis.Nil): // a reply: the command's, nil included
		return reply, err
	case !serverError(err):
		return nil, fmt.Errorf("redislock: the guarded write under %q got no answer, and may have run: %w",
			l.key, err)
	case redis.HasErrorPrefix(err, "FENCED"):
		fenced := &FencedError{Key: l.key, Token: l.token, Err: err}
		l.lease.lose(Fenced, fenced)
		return nil, fenced
	case redis.HasErrorPrefix(err, "CROSSSLOT"):
		return nil, fmt.Errorf("redislock: the keys of a guarded write must be in the hash slot of the lock "+
			"%q: give them its hash tag, as in %s: %w", l.key, sameSlotExample(l.key), err)
	case b == Module && libraryMissing(err):
		return nil, fmt.Errorf("redislock: the server has no LOCK.GUARD: load the redis-lock module of this "+
			"release (fenced writes came with version 4 of the commands): %w", err)
	}
	return nil, err
}

// sendGuard sends lock's guarded command through b, on a connection to the lock
// key's server, once (see sendNoting).
func (l *Locker) sendGuard(ctx context.Context, b Backend, lock *Lock, keys []string, command []any) (any,
	error) {
	reply, _, err := l.sendCall(ctx, ControlLimit, b, false, "lock_guard", lock.key,
		b.guard(lock.key, keys, lock.token, command))
	return reply, err
}

// lacksGuard reports whether err is the scripts path's answer to a call it does not
// have: a script of a library without lock_guard.
func lacksGuard(err error) bool {
	return redis.HasErrorPrefix(err, "unknown function 'lock_guard'")
}

// libraryLacksGuard is the error of a library on key's server that answers
// lock_version but has no lock_guard (loaded before it existed); nil if the server
// has no library at all (lock_version is not found either).
func (l *Locker) libraryLacksGuard(ctx context.Context, b Backend, key string) error {
	reply, _, err := l.sendCall(ctx, ControlLimit, b, true, "lock_version", key, b.command("lock_version", ""))
	version, ok := reply.(int64)
	if err != nil || !ok {
		return nil
	}
	return &LibraryVersionError{Found: version, Min: MinLibraryVersion, Max: LibraryVersion, Lacks: "lock_guard"}
}

// sameSlotExample is a data key in the hash slot of the lock key: with its hash
// tag, or with the key itself as the tag.
func sameSlotExample(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open:open+end+2] + ":out"
		}
	}
	if strings.ContainsAny(key, "{}") {
		return "{job:1}:out beside a lock {job:1}"
	}
	return "{" + key + "}:out"
}
