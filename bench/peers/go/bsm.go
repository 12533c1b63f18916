package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	goredislib "github.com/redis/go-redis/v9"
)

// bsmTTL is the lock's TTL: bsm/redislock does not renew, and without a deadline on
// the context an Obtain retries for at most the TTL.
const bsmTTL = 10 * time.Second

// bsmSide is bsm/redislock as its example waits: Obtain with a linear backoff of
// 100 ms between tries (1 ms when tuned), until its deadline (bsm sets the TTL when
// the context has none); then the client asks again.
type bsmSide struct {
	client *redislock.Client
	key    string
	every  time.Duration
	lock   *redislock.Lock
}

func newBsm(rdb *goredislib.Client, key string, tuned bool) side {
	every := 100 * time.Millisecond
	if tuned {
		every = time.Millisecond
	}
	return &bsmSide{client: redislock.New(rdb), key: key, every: every}
}

func (s *bsmSide) acquire(ctx context.Context) error {
	lock, err := s.client.Obtain(ctx, s.key, bsmTTL, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(s.every),
	})
	if errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		return errRetry
	}
	s.lock = lock
	return err
}

func (s *bsmSide) release(ctx context.Context) error {
	return s.lock.Release(ctx)
}
