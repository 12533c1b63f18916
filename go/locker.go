package redislock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Locker takes locks on one Redis deployment: a plain client, a Cluster client, or
// a Sentinel failover client. It finds out on first use which form of the lock the
// server offers (a [Backend]): the module if loaded, else the redislock function
// library, else the library sent as a script; [WithBackend] forces one. Safe for
// concurrent use; make one per deployment and share it.
//
// Waits and renewals run on connections of the locker's own, made from the
// client's options (one connection each, bounded by the wait or the lease, closed
// when a wait is cancelled); everything else goes through the client itself.
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

// run sends c on the locker's client.
func (l *Locker) run(ctx context.Context, c call) (any, error) {
	cmd := redis.NewCmd(ctx, c.args...)
	if c.keyPos > 0 {
		cmd.SetFirstKeyPos(int8(c.keyPos))
	}
	_ = l.client.Process(ctx, cmd)
	return cmd.Result()
}

// call makes library call function on key through backend b on the locker's
// client. On the scripts backend, a NOSCRIPT reply (a restart, SCRIPT FLUSH, a
// failover) loads the library and sends the call once more: it did not run.
func (l *Locker) call(ctx context.Context, b Backend, function, key string, args ...any) (any, error) {
	c := b.command(function, key, args...)
	reply, err := l.run(ctx, c)
	if b == Scripts && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := l.client.ScriptLoad(ctx, libraryScript).Err(); err != nil {
			return nil, err
		}
		reply, err = l.run(ctx, c)
	}
	return reply, err
}

// callOn is call on a dedicated connection.
func callOn(ctx context.Context, d *dedicated, b Backend, function, key string, args ...any) (any, error) {
	c := b.command(function, key, args...)
	reply, err := d.do(ctx, c.args...)
	if b == Scripts && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if _, err := d.do(ctx, "SCRIPT", "LOAD", libraryScript); err != nil {
			return nil, err
		}
		reply, err = d.do(ctx, c.args...)
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
