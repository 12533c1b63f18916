// Package pgtest starts a real PostgreSQL for a test (tests/postgres/start: initdb
// and pg_ctl as an unprivileged user, on a free loopback port, in a directory of its
// own), stopped when the test ends. Where no PostgreSQL is installed the test is
// skipped, saying how to install one. No mocks: the fence tests talk to it through
// database/sql and lib/pq.
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/lib/pq" // database/sql's "postgres" driver

	"redis-lock/go/redislock/internal/redistest"
)

// Start starts a PostgreSQL server of the test's own and returns a pool of
// connections to it, both closed when the test ends.
func Start(t testing.TB) *sql.DB {
	t.Helper()
	scripts := filepath.Join(redistest.Root(), "tests", "postgres")
	dir := filepath.Join(t.TempDir(), "postgres")
	var stderr bytes.Buffer
	start := exec.Command(filepath.Join(scripts, "start"), dir)
	start.Stderr = &stderr
	out, err := start.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "no PostgreSQL server found") {
			t.Skipf("skipped: no PostgreSQL on this machine (make deps installs it): %s",
				strings.TrimSpace(stderr.String()))
		}
		t.Fatalf("tests/postgres/start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { _ = exec.Command(filepath.Join(scripts, "stop"), dir).Run() })
	db, err := sql.Open("postgres", strings.TrimSpace(string(out))+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", strings.TrimSpace(string(out)), err)
	}
	return db
}
