package main

import (
	"context"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
)

// oursTTL is the TTL of our locks, as the other sides of ours (bench/peers/clients.py).
const oursTTL = 10 * time.Second

// oursSide is this repository's Go client: Acquire waits in the server's queue
// until it holds the lock (the module's LOCK.ACQUIRE WAIT, or the library's
// protocol), with renewal and the lease as a user gets them.
type oursSide struct {
	locker *redislock.Locker
	key    string
	lock   *redislock.Lock
}

func newOurs(rdb *goredislib.Client, key, backend string) (side, error) {
	b, err := redislock.ParseBackend(backend)
	if err != nil {
		return nil, err
	}
	return &oursSide{locker: redislock.New(rdb, redislock.WithBackend(b)), key: key}, nil
}

func (s *oursSide) acquire(ctx context.Context) error {
	lock, err := s.locker.Acquire(ctx, s.key, oursTTL)
	s.lock = lock
	return err
}

func (s *oursSide) release(ctx context.Context) error {
	return s.lock.Release(ctx)
}
