package main

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

// redsyncSide is a redsync mutex with redsync's defaults (8 s expiry, 32 tries, a
// random 50–250 ms delay between them), or with tuned a try every millisecond
// without giving up: the setting a user who measures latency would reach for.
type redsyncSide struct{ mutex *redsync.Mutex }

func newRedsync(rdb *goredislib.Client, key string, tuned bool) side {
	var options []redsync.Option
	if tuned {
		options = []redsync.Option{redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond)}
	}
	return redsyncSide{redsync.New(goredis.NewPool(rdb)).NewMutex(key, options...)}
}

func (s redsyncSide) acquire(ctx context.Context) error {
	err := s.mutex.LockContext(ctx)
	// redsync gave up after its tries (v4.18 says so with *ErrTaken when its last
	// try found the lock taken, else ErrFailed): the client asks again.
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return errRetry
	}
	return err
}

func (s redsyncSide) release(ctx context.Context) error {
	_, err := s.mutex.UnlockContext(ctx)
	return err
}
