package redislock_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
)

// A write to Redis that lands only while the lock's token holds it: the server
// checks the token and runs the SET in one step. The data key shares the lock
// key's hash slot ({job:1}), as a Cluster needs.
func ExampleLock_Guard() {
	ctx := context.Background()
	locker := redislock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390"}))
	defer locker.Close()
	lock, err := locker.Acquire(ctx, "{job:1}", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	out := "{job:1}:out"
	err = lock.Guard(ctx, []string{out}, "SET", out, "the result").Err()
	if errors.Is(err, redislock.ErrFenced) {
		log.Print("the lock was lost; a newer holder may exist, and nothing was written")
	}
}

// A write to PostgreSQL fenced with the lock's token, in the write's own
// transaction: the fence first, then the writes, then the commit.
func ExampleLock_FencePostgres() {
	ctx := context.Background()
	var db *sql.DB // sql.Open("pgx", url) with github.com/jackc/pgx/v5/stdlib, or lib/pq's "postgres"
	var lock *redislock.Lock
	write := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := lock.FencePostgres(ctx, tx, lock.Key()); err != nil {
			return err // errors.Is(err, redislock.ErrFenced): a newer holder has written
		}
		if _, err := tx.ExecContext(ctx, "UPDATE reports SET body = $1 WHERE day = $2", "…", "2026-12-07"); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := redislock.CreatePostgresFenceTable(ctx, db); err != nil { // once, at setup
		log.Fatal(err)
	}
	if err := write(); err != nil {
		log.Print(err)
	}
}
