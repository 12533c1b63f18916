// Command worker publishes a report once a minute, once across every instance that
// runs it: each tick, the instances ask for the lock without waiting; the one that
// gets it builds the report and publishes it with a write guarded by its token, so a
// holder that stalled past its lease cannot overwrite the work of the next one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "the Redis server")
	every := flag.Duration("every", time.Minute, "how often the report is due")
	flag.Parse()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithLogger(slog.Default()))
	defer locker.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ticker := time.NewTicker(*every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case tick := <-ticker.C:
			period := tick.Truncate(*every).UTC().Format(time.RFC3339)
			err := locker.Run(ctx, "{report}", 30*time.Second, func(ctx context.Context, lock *redislock.Lock) error {
				report, err := build(ctx, period) // renewed every 10 s meanwhile
				if err != nil {
					return err // ctx ends if the lock is lost: build stops early
				}
				// Runs only while the lock's token holds it, checked by the server in
				// the same step: a holder that stalled past its lease writes nothing
				// (ErrFenced). The hash shares the lock key's hash slot.
				fresh, err := lock.Guard(ctx, []string{"{report}:published"},
					"HSETNX", "{report}:published", period, report).Int()
				if err == nil && fresh == 1 {
					slog.Info("published", "period", period, "token", lock.Token())
				}
				return err
			}, redislock.WaitFor(0))
			if err != nil && !errors.Is(err, redislock.ErrNotObtained) {
				slog.Error("report", "period", period, "error", err)
			}
		}
	}
}

// build is the work the lock guards.
func build(ctx context.Context, period string) (string, error) {
	select {
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case <-time.After(100 * time.Millisecond):
		return fmt.Sprintf("the report of %s", period), nil
	}
}
