package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Every lock command runs on a connection of the locker's own (contract.md "Clients"): a
// wait blocks its connection, a renewal must not queue behind anything nor be
// retried past the lease, and each command has its bound (a wait and its margin, the
// lease, the control or release limit). go-redis bounds a read by its client's
// ReadTimeout (3 s by default) unless ContextTimeoutEnabled, retries on its own, and
// does not stop a read when a context is cancelled; so these connections come from
// clients of the package's own, made from the user's client's options: one
// connection each, no retries, no read timeout but the context's deadline, and a
// socket the package can close when the context is cancelled, which ends a wait at
// once (the server then drops the waiter). Idle ones are kept for reuse.

// idleLimit is how long an unused dedicated connection is kept for reuse.
const idleLimit = 30 * time.Second

// maxIdle is how many unused dedicated connections are kept per server.
const maxIdle = 64

// dedicated is a go-redis client of one connection, whose socket can be closed
// from another goroutine.
type dedicated struct {
	client *redis.Client
	target string
	idle   time.Time

	mu        sync.Mutex
	conn      net.Conn
	cancelled bool
}

// cut closes the socket: a read under way returns at once. The client is not
// usable after it.
func (d *dedicated) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelled = true
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

func (d *dedicated) dialed(conn net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancelled {
		_ = conn.Close()
	}
	d.conn = conn
}

// do sends args on the connection and returns the reply. ctx's deadline bounds it;
// its cancellation closes the socket (the caller must then close d).
func (d *dedicated) do(ctx context.Context, args ...any) (any, error) {
	stop := context.AfterFunc(ctx, d.cut)
	reply, err := d.client.Do(ctx, args...).Result()
	if !stop() {
		// The context ended (the socket is closed): that is why, whatever the read
		// saw.
		err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return reply, err
}

// conns hands out dedicated connections to the server that serves a key, and takes
// back the ones whose last command was answered.
type conns struct {
	client redis.UniversalClient

	mu     sync.Mutex
	idle   map[string][]*dedicated
	closed bool
}

func newConns(client redis.UniversalClient) *conns {
	return &conns{client: client, idle: map[string][]*dedicated{}}
}

// options are the options of the client that serves key: the user's client, or
// in a Cluster the master of key's slot.
func (c *conns) options(ctx context.Context, key string) (*redis.Options, error) {
	switch client := c.client.(type) {
	case *redis.Client:
		return client.Options(), nil
	case *redis.ClusterClient:
		node, err := client.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Options(), nil
	}
	return nil, fmt.Errorf("redislock: waits and renewals need a *redis.Client (plain or "+
		"NewFailoverClient) or a *redis.ClusterClient, not a %T", c.client)
}

// get is a connection to the server of key, reused if one is idle.
func (c *conns) get(ctx context.Context, key string) (*dedicated, error) {
	base, err := c.options(ctx, key)
	if err != nil {
		return nil, err
	}
	target := base.Addr
	c.mu.Lock()
	idle := c.idle[target]
	for len(idle) > 0 {
		d := idle[len(idle)-1]
		idle = idle[:len(idle)-1]
		if time.Since(d.idle) < idleLimit {
			c.idle[target] = idle
			c.mu.Unlock()
			return d, nil
		}
		_ = d.client.Close()
	}
	c.idle[target] = idle
	c.mu.Unlock()
	return newDedicated(base, target), nil
}

// put takes d back for reuse, or closes it.
func (c *conns) put(d *dedicated) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle[d.target]) >= maxIdle {
		_ = d.client.Close()
		return
	}
	d.idle = time.Now()
	c.idle[d.target] = append(c.idle[d.target], d)
}

// done takes d back after a command that ended with err: reused if the server
// answered (a reply, or an error reply that leaves the connection as it was),
// closed otherwise.
func (c *conns) done(d *dedicated, err error) {
	var reply redis.Error
	if err == nil || errors.Is(err, redis.Nil) || (errors.As(err, &reply) && !moved(err)) {
		c.put(d)
		return
	}
	_ = d.client.Close()
}

func (c *conns) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, idle := range c.idle {
		for _, d := range idle {
			_ = d.client.Close()
		}
	}
	c.idle = map[string][]*dedicated{}
}

// reroute refreshes a Cluster client's slots after a MOVED or ASK reply.
func (c *conns) reroute(ctx context.Context) {
	if cluster, ok := c.client.(*redis.ClusterClient); ok {
		cluster.ReloadState(ctx)
	}
}

func moved(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}

func newDedicated(base *redis.Options, target string) *dedicated {
	d := &dedicated{target: target}
	opt := *base
	dial := opt.Dialer
	if dial == nil {
		dial = redis.NewDialer(&opt)
	}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err == nil {
			d.dialed(conn)
		}
		return conn, err
	}
	opt.PoolSize = 1
	opt.MinIdleConns = 0
	opt.MaxIdleConns = 1
	opt.MaxActiveConns = 0
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.ReadTimeout = -1
	opt.WriteTimeout = -1
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = min(opt.DialTimeout, ControlLimit)
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	d.client = redis.NewClient(&opt)
	return d
}
