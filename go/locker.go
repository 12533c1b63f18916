package redislock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker takes locks on one Redis deployment: a plain client, a Cluster client, or
// a Sentinel failover client. It finds out on first use which form of the lock the
// server offers (a [Backend]): the module if loaded, else the redislock function
// library, else the library sent as a script; [WithBackend] forces one. Safe for
// concurrent use; make one per deployment and share it.
//
// Its commands run on connections of the locker's own, made from the client's
// options (for a Cluster, from the key's master's; for Sentinel, through its
// dialer): one command at a time each, bounded (by the wait and [WaitMargin], the
// lease, [ControlLimit] or [ReleaseLimit]), closed when a wait is cancelled. The
// client's own pool, retries and hooks are not used.
type Locker struct {
	client redis.UniversalClient
	forced Backend
	log    *slog.Logger
	conns  *conns

	detected atomic.Int32 // a Backend; Auto: not known yet
	detectMu sync.Mutex
}

// New is a Locker on client, with the options given.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{client: client, log: slog.New(discard{}), conns: newConns(client)}
	for _, opt := range opts {
		opt(l)
	}
	return l
}

// Close closes the connections the locker keeps for waits and renewals while
// they are idle. Locks it holds keep theirs until released. The client given to
// New stays open: it is the caller's.
func (l *Locker) Close() error {
	l.conns.close()
	return nil
}

// Backend is the backend the locker uses, found out on first use: the module if the
// server has it, else the library if it is loaded (FCALL_RO lock_version), else the
// library as a script (EVALSHA), or the one WithBackend forced, checked.
func (l *Locker) Backend(ctx context.Context) (Backend, error) {
	if b := Backend(l.detected.Load()); b != Auto {
		return b, nil
	}
	l.detectMu.Lock()
	defer l.detectMu.Unlock()
	if b := Backend(l.detected.Load()); b != Auto {
		return b, nil
	}
	b, err := l.detect(ctx)
	if err != nil {
		return Auto, err
	}
	l.detected.Store(int32(b))
	return b, nil
}

// forget drops the backend found: the next call finds it out again (after a server
// lost its library in a restart, or a failover to a node without it).
func (l *Locker) forget(b Backend) {
	l.detected.CompareAndSwap(int32(b), int32(Auto))
}

// send makes library call function on key (detection: "" and "COMMAND") through
// backend b, on a connection of the locker's own to key's server, within limit (or
// ctx's deadline, if sooner). A reply lost to a broken connection (a server
// restarted since the connection was last used, a failover's sentinel killing
// it), or a Cluster slot moved, is asked for once more on a fresh connection: every
// call sent this way may be repeated (the same owner gets the same answer, but for
// a release, which sendNoting tells). A call that got no answer in time is not.
func (l *Locker) send(ctx context.Context, limit time.Duration, b Backend, function, key string,
	args ...any) (any, error) {
	reply, _, err := l.sendNoting(ctx, limit, b, true, function, key, args...)
	return reply, err
}

// sendNoting is send, and when the call was sent again after its reply was lost to
// a broken connection (zero: it was not; a slot that moved does not count: the
// call did not run). resend: whether to send it again then (a release of an owner
// others may hold under too is not).
func (l *Locker) sendNoting(ctx context.Context, limit time.Duration, b Backend, resend bool, function,
	key string, args ...any) (reply any, resent time.Time, err error) {
	return l.sendCall(ctx, limit, b, resend, function, key, b.call(function, key, args...))
}

// sendCall is sendNoting of c, the words of library call function on key through b.
func (l *Locker) sendCall(ctx context.Context, limit time.Duration, b Backend, resend bool, function,
	key string, c call) (reply any, resent time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lost := false
	for tries := 0; tries < 2; tries++ {
		var d *dedicated
		if d, err = l.conns.get(ctx, key); err != nil {
			return nil, resent, err
		}
		if lost {
			resent = time.Now()
		}
		reply, err = doCall(ctx, d, b, function, c)
		l.conns.done(d, err)
		switch {
		case moved(err):
			l.conns.reroute(ctx)
		case err == nil || serverError(err) || errors.Is(err, redis.Nil) || ctx.Err() != nil || isTimeout(err):
			return reply, resent, err
		case dialFailed(err): // nothing was sent: once more
		case !resend:
			return reply, resent, err
		default:
			lost = true
		}
	}
	return reply, resent, err
}

// dialFailed reports whether err is a connect that failed.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// probe is the function of send that sends its arguments as they are (detection's
// COMMAND INFO).
const probe = "COMMAND"

// callOn makes library call function on key through backend b on d. On the
// scripts backend, a NOSCRIPT reply (a restart, SCRIPT FLUSH, a failover) loads the
// library and sends the call once more: it did not run.
func callOn(ctx context.Context, d *dedicated, b Backend, function, key string, args ...any) (any, error) {
	return doCall(ctx, d, b, function, b.call(function, key, args...))
}

// doCall is callOn of c, the words of library call function through b.
func doCall(ctx context.Context, d *dedicated, b Backend, function string, c call) (any, error) {
	reply, err := d.do(ctx, c.args...)
	if b == Scripts && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if _, err := d.do(ctx, "SCRIPT", "LOAD", libraryScript); err != nil {
			return nil, err
		}
		reply, err = d.do(ctx, c.args...)
	}
	if b == Functions && function != "lock_version" && redis.HasErrorPrefix(err, "WRONGTYPE") {
		// An older library loaded over the one detected cannot read what that one
		// wrote: say which version the server has now rather than WRONGTYPE.
		if found, verr := d.do(ctx, Functions.command("lock_version", "").args...); verr == nil {
			if version, ok := found.(int64); ok && CheckLibraryVersion(version) != nil {
				return nil, CheckLibraryVersion(version)
			}
		}
	}
	return reply, err
}

// libraryMissing is the reply of a call on a backend the server no longer has: the
// library deleted or lost in a restart (ERR Function not found), the module not
// loaded (ERR unknown command 'LOCK.…').
func libraryMissing(err error) bool {
	if err == nil {
		return false
	}
	if redis.HasErrorPrefix(err, "Function not found") {
		return true
	}
	text := strings.ToLower(err.Error())
	return redis.HasErrorPrefix(err, "unknown command") && strings.Contains(text, "'lock.")
}

// serverError reports whether err is an error reply of the server (not a network
// failure, a timeout or a cancellation).
func serverError(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && !errors.Is(err, redis.Nil)
}

// discard is a slog handler that drops everything (slog.DiscardHandler is Go 1.24).
type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }
