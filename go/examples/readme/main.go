package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
)

func main() {
	locker := redislock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390"}))
	defer locker.Close()
	err := locker.Run(context.Background(), "report:daily", 30*time.Second,
		func(ctx context.Context, lock *redislock.Lock) error {
			// Renewed every 10 s; ctx ends if the lock is lost, before anyone
			// else can be granted it.
			if err := writeReport(ctx, lock, 1); err != nil {
				return err
			}
			return writeReport(ctx, lock, 2)
		}, redislock.WaitFor(time.Minute)) // in the server's FIFO queue, no polling
	switch {
	case errors.Is(err, redislock.ErrNotObtained):
		log.Print("another instance held it all minute")
	case errors.Is(err, redislock.ErrFenced):
		log.Print("stalled past the lease: another instance took over, and nothing was overwritten")
	case err != nil:
		log.Fatal(err)
	}
}

// writeReport writes one part only while the lock's token holds it: the server
// checks the token and runs the SET in one step (LOCK.GUARD). The key shares the
// lock key's hash slot ({report:daily}), as a Cluster needs.
func writeReport(ctx context.Context, lock *redislock.Lock, part int) error {
	key := fmt.Sprintf("{report:daily}:part:%d", part)
	return lock.Guard(ctx, []string{key}, "SET", key, fmt.Sprintf("part %d", part)).Err()
}
