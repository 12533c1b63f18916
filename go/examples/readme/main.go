package main

import (
	"context"
	"errors"
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
			if err := writeReport(ctx, 1, lock.Token()); err != nil {
				return err
			}
			return writeReport(ctx, 2, lock.Token()) // writes fenced with the token
		}, redislock.WaitFor(time.Minute)) // in the server's FIFO queue, no polling
	if errors.Is(err, redislock.ErrNotObtained) {
		log.Print("another instance held it all minute")
	} else if err != nil {
		log.Fatal(err)
	}
}

// writeReport writes one part unless the lock is lost: ctx.Err() reads the lock's
// clock, so it is checked right before the write.
func writeReport(ctx context.Context, part int, fence int64) error {
	if ctx.Err() != nil {
		return context.Cause(ctx) // lost: another instance may hold it now
	}
	log.Printf("part %d of the report, fenced with token %d", part, fence)
	return nil
}
