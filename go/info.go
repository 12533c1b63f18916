package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info is who holds a lock (LOCK.INFO, or the library's lock_info).
type Info struct {
	// Mode is "exclusive" or "shared".
	Mode string
	// Holders are the holdings, oldest first.
	Holders []Holder
	// Waiters is how many clients wait for the lock now.
	Waiters int64
}

// Holder is one holding of a lock.
type Holder struct {
	Owner string
	// TTL is the time the holding has left.
	TTL   time.Duration
	Token int64
}

// Info is who holds the lock at key, its holdings' TTLs and tokens, and how many
// wait; nil if nobody holds it.
func (l *Locker) Info(ctx context.Context, key string) (*Info, error) {
	b, err := l.Backend(ctx)
	if err != nil {
		return nil, err
	}
	reply, err := l.send(ctx, ControlLimit, b, "lock_info", key)
	if libraryMissing(err) {
		l.forget(b)
		if b, err = l.Backend(ctx); err != nil {
			return nil, err
		}
		reply, err = l.send(ctx, ControlLimit, b, "lock_info", key)
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseInfo(reply)
}

// fields reads a RESP3 map or a RESP2 flat field/value array.
func fields(reply any) (map[string]any, bool) {
	out := map[string]any{}
	switch v := reply.(type) {
	case map[any]any:
		for k, value := range v {
			name, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[name] = value
		}
	case map[string]any:
		return v, true
	case []any:
		if len(v)%2 != 0 {
			return nil, false
		}
		for i := 0; i < len(v); i += 2 {
			name, ok := v[i].(string)
			if !ok {
				return nil, false
			}
			out[name] = v[i+1]
		}
	default:
		return nil, false
	}
	return out, true
}

func parseInfo(reply any) (*Info, error) {
	if reply == nil {
		return nil, nil
	}
	top, ok := fields(reply)
	if !ok {
		return nil, fmt.Errorf("redislock: unexpected lock info %v", reply)
	}
	info := &Info{}
	info.Mode, _ = top["mode"].(string)
	info.Waiters, _ = top["waiters"].(int64)
	holders, _ := top["holders"].([]any)
	for _, entry := range holders {
		holding, ok := fields(entry)
		if !ok {
			return nil, fmt.Errorf("redislock: unexpected holding %v", entry)
		}
		var h Holder
		h.Owner, _ = holding["owner"].(string)
		ttl, _ := holding["ttl"].(int64)
		h.TTL = time.Duration(ttl) * time.Millisecond
		h.Token, _ = holding["token"].(int64)
		info.Holders = append(info.Holders, h)
	}
	return info, nil
}
