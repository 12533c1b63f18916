package redislock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/pgtest"
	"redis-lock/go/redislock/internal/redistest"
)

// fencedDB is a PostgreSQL of the test's own with the fence table and a table of
// writes (one value per resource).
func fencedDB(t *testing.T) *sql.DB {
	t.Helper()
	db := pgtest.Start(t)
	ctx := context.Background()
	must(t, redislock.CreatePostgresFenceTable(ctx, db))
	must(t, redislock.CreatePostgresFenceTable(ctx, db)) // again: IF NOT EXISTS
	_, err := db.ExecContext(ctx, "CREATE TABLE writes (resource text PRIMARY KEY, value text NOT NULL)")
	must(t, err)
	return db
}

// write is one transaction: the fence, then the write, committed; rolled back on
// an error of either. fence is lock.FencePostgres or a bare token's.
func write(ctx context.Context, db *sql.DB, fence func(*sql.Tx) error, resource, value string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fence(tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO writes (resource, value) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`, resource, value); err != nil {
		return err
	}
	return tx.Commit()
}

func stored(t *testing.T, db *sql.DB, resource string) string {
	t.Helper()
	var value string
	err := db.QueryRow("SELECT value FROM writes WHERE resource = $1", resource).Scan(&value)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return value
}

func lockFence(ctx context.Context, lock *redislock.Lock, resource string) func(*sql.Tx) error {
	return func(tx *sql.Tx) error { return lock.FencePostgres(ctx, tx, resource) }
}

// The holder's fenced writes land, again with the same token; once a newer holder
// has written, the old holder's fence refuses it (a FencedError, the transaction
// rolled back, the newer row intact) and its lock is lost at once (cause Fenced).
func TestThePostgresFenceRefusesAnOlderHolder(t *testing.T) {
	t.Parallel()
	db := fencedDB(t)
	e := newEnv(t, redistest.Module, redislock.Module)
	ctx := context.Background()
	old := acquire(t, e.locker, "report", 30*time.Second)
	must(t, write(ctx, db, lockFence(ctx, old, "report"), "report", "first"))
	must(t, write(ctx, db, lockFence(ctx, old, "report"), "report", "second"))
	if got := stored(t, db, "report"); got != "second" {
		t.Fatalf("report is %q", got)
	}

	e.server.Do("DEL", "report") // the old holder stalls; its lock goes to another
	newer := acquire(t, e.locker, "report", 30*time.Second)
	must(t, write(ctx, db, lockFence(ctx, newer, "report"), "report", "newer"))
	err := write(ctx, db, lockFence(ctx, old, "report"), "report", "stale")
	var fenced *redislock.FencedError
	if !errors.Is(err, redislock.ErrFenced) || !errors.As(err, &fenced) || fenced.Token != old.Token() ||
		fenced.Key != "report" {
		t.Fatalf("the older holder's write: %v, want a FencedError", err)
	}
	if got := stored(t, db, "report"); got != "newer" {
		t.Fatalf("report is %q, want the newer holder's", got)
	}
	var lost *redislock.LostError
	if !errors.As(context.Cause(old.Context()), &lost) || lost.Reason != redislock.Fenced {
		t.Fatalf("the fenced lock's cause: %v, want Reason Fenced", context.Cause(old.Context()))
	}
	if err := write(ctx, db, lockFence(ctx, old, "report"), "report", "again"); !errors.Is(err,
		redislock.ErrLockLost) {
		t.Fatalf("a fence of a lock known lost: %v, want its loss", err)
	}
	if newer.Context().Err() != nil {
		t.Fatal("the newer holder's lock ended")
	}
}

// A bare token: equal passes, lower is fenced, a token below 1 is refused before
// sending; a read lock's token does not fence.
func TestThePostgresFenceOfABareToken(t *testing.T) {
	t.Parallel()
	db := fencedDB(t)
	ctx := context.Background()
	token := func(n int64) func(*sql.Tx) error {
		return func(tx *sql.Tx) error { return redislock.FencePostgres(ctx, tx, "job", n) }
	}
	must(t, write(ctx, db, token(5), "job", "five"))
	must(t, write(ctx, db, token(5), "job", "five again"))
	if err := write(ctx, db, token(3), "job", "three"); !errors.Is(err, redislock.ErrFenced) ||
		!strings.Contains(err.Error(), "greater token") {
		t.Fatalf("token 3 after 5: %v", err)
	}
	must(t, write(ctx, db, token(9), "job", "nine"))
	for _, bad := range []int64{0, -1} {
		if err := write(ctx, db, token(bad), "job", "bad"); !errors.Is(err, redislock.ErrInvalidArgument) {
			t.Fatalf("token %d: %v", bad, err)
		}
	}
	if got := stored(t, db, "job"); got != "nine" {
		t.Fatalf("job is %q", got)
	}
	if err := redislock.FencePostgres(ctx, nil, "job", 10); !errors.Is(err, redislock.ErrInvalidArgument) {
		t.Fatalf("a nil transaction: %v", err)
	}

	e := newEnv(t, redistest.Module, redislock.Module)
	reader := acquire(t, e.locker, "shared", 30*time.Second, redislock.Shared())
	if err := write(ctx, db, lockFence(ctx, reader, "shared"), "shared", "v"); !errors.Is(err,
		redislock.ErrInvalidArgument) || !strings.Contains(err.Error(), "exclusive") {
		t.Fatalf("a read lock's fence: %v", err)
	}
}

// The fence row stays locked until the transaction ends: a newer holder's fence
// waits for the older writer's commit, and the older one cannot write after it.
func TestANewerFenceWaitsForTheOlderWritersCommit(t *testing.T) {
	t.Parallel()
	db := fencedDB(t)
	ctx := context.Background()
	older, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer func() { _ = older.Rollback() }()
	must(t, redislock.FencePostgres(ctx, older, "res", 5))
	newer := make(chan error, 1)
	go func() {
		newer <- write(ctx, db, func(tx *sql.Tx) error { return redislock.FencePostgres(ctx, tx, "res", 7) },
			"res", "seven")
	}()
	select {
	case err := <-newer:
		t.Fatalf("the newer fence did not wait for the older transaction: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_, err = older.ExecContext(ctx, "INSERT INTO writes (resource, value) VALUES ('res', 'five')")
	must(t, err)
	must(t, older.Commit())
	must(t, <-newer)
	if got := stored(t, db, "res"); got != "seven" {
		t.Fatalf("res is %q", got)
	}
	err = write(ctx, db, func(tx *sql.Tx) error { return redislock.FencePostgres(ctx, tx, "res", 5) }, "res", "x")
	if !errors.Is(err, redislock.ErrFenced) {
		t.Fatalf("the older token after the newer wrote: %v", err)
	}
}

// Without the fence table, the error says how to make it.
func TestAMissingFenceTableSaysHowToMakeIt(t *testing.T) {
	t.Parallel()
	db := pgtest.Start(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	err = redislock.FencePostgres(ctx, tx, "res", 1)
	if err == nil || errors.Is(err, redislock.ErrFenced) || !strings.Contains(err.Error(), "CreatePostgresFenceTable") {
		t.Fatalf("no table: %v", err)
	}
}
