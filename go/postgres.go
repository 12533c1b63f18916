package redislock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Fences in PostgreSQL (docs/fencing.md): a table keeps, per resource, the highest
// token it has accepted; the fence statement, run in the write's own transaction
// before the write, moves it up to the holder's token or returns no row when a
// greater one has written. Its row stays locked until the transaction ends, so a
// newer holder's fence waits for an older writer's commit. The statements are the
// repository's fence/postgresql/*.sql, generated into postgres_gen.go. The helpers
// take database/sql's types, so any driver works (pgx's stdlib, lib/pq), and the
// package imports none.

// FencePostgres fences tx with the lock's token for resource: it runs
// [PostgresFenceSQL] in tx, which must come before the writes it fences. No row
// back means a holder with a greater token has written: a [*FencedError]
// (errors.Is(err, ErrFenced)), and the lock is lost at once (its context cancelled,
// with a [*LostError] of Reason Fenced). Roll tx back on any error. The fence
// table must exist ([CreatePostgresFenceTable]). The resource is any name the
// writers agree on; the lock's key is the usual one.
//
//	tx, err := db.BeginTx(ctx, nil)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	if err := lock.FencePostgres(ctx, tx, lock.Key()); err != nil {
//		return err // errors.Is(err, redislock.ErrFenced): a newer holder has written
//	}
//	if _, err := tx.ExecContext(ctx, "UPDATE reports SET body = $1 WHERE day = $2", body, day); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// Only an exclusive holding's token fences (a read lock's or a permit's tokens do
// not order writers): a shared lock's is ErrInvalidArgument, and so is a lock the
// client knows is lost or released (with the loss, errors.Is(err, ErrLockLost), or
// ErrReleased), before anything is sent.
func (l *Lock) FencePostgres(ctx context.Context, tx *sql.Tx, resource string) error {
	if l.kind.shared {
		return fmt.Errorf("%w: only an exclusive holding's token fences: the tokens of shared holdings "+
			"and permits do not order writers", ErrInvalidArgument)
	}
	if l.ctx.Err() != nil {
		return fmt.Errorf("redislock: the fence of %q under %q was not run: %w", resource, l.key,
			context.Cause(l.ctx))
	}
	err := FencePostgres(ctx, tx, resource, l.token)
	if errors.Is(err, ErrFenced) {
		l.lease.lose(Fenced, err)
	}
	return err
}

// FencePostgres fences tx with token, an exclusive holding's fencing token, for
// resource: [Lock.FencePostgres] for a token from elsewhere (a job that was handed
// its lock's token). A [*FencedError] when a holder with a greater token has
// written; a token below 1 is ErrInvalidArgument.
func FencePostgres(ctx context.Context, tx *sql.Tx, resource string, token int64) error {
	if tx == nil {
		return fmt.Errorf("%w: a fence runs in the write's own transaction: tx is nil", ErrInvalidArgument)
	}
	if token < 1 {
		return fmt.Errorf("%w: token %d: fencing tokens are positive", ErrInvalidArgument, token)
	}
	var stored int64
	err := tx.QueryRowContext(ctx, PostgresFenceSQL, resource, token).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &FencedError{Key: resource, Token: token}
	case err != nil && strings.Contains(err.Error(), `"redis_lock_fence" does not exist`):
		return fmt.Errorf("redislock: the PostgreSQL fence of %q: no fence table: create it once with "+
			"CreatePostgresFenceTable: %w", resource, err)
	case err != nil:
		return fmt.Errorf("redislock: the PostgreSQL fence of %q: %w", resource, err)
	}
	return nil
}

// CreatePostgresFenceTable creates the fence table if it does not exist
// ([PostgresFenceTableSQL]), on db: a *sql.DB, a *sql.Conn or a *sql.Tx. Once, at
// setup or in a migration.
func CreatePostgresFenceTable(ctx context.Context,
	db interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}) error {
	if _, err := db.ExecContext(ctx, PostgresFenceTableSQL); err != nil {
		return fmt.Errorf("redislock: creating the PostgreSQL fence table: %w", err)
	}
	return nil
}
