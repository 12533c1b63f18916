package redislock_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"redis-lock/go/redislock"
	"redis-lock/go/redislock/internal/redistest"
)

// records keeps the messages of the events a logger gets, with their key.
type records struct {
	mu     sync.Mutex
	events []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, record slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, record.Level.String()+" "+record.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) has(event string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e == event {
			return true
		}
	}
	return false
}

func TestEventsGoToTheLoggerGiven(t *testing.T) {
	server := redistest.Start(t, redistest.Module)
	logged := &records{}
	locker := redislock.New(server.Client(), redislock.WithLogger(slog.New(logged)))
	defer locker.Close()
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "job", time.Minute)
	must(t, err)
	must(t, lock.Release(ctx))
	lost, err := locker.TryAcquire(ctx, "job", 600*time.Millisecond)
	must(t, err)
	server.Kill() // the renewals from 200 ms on are refused; the lease runs out at 540 ms
	<-lost.Context().Done()
	redistest.WaitUntil(t, 2*time.Second, "the events", func() bool {
		return logged.has("DEBUG lock acquired") && logged.has("DEBUG lock released") &&
			logged.has("WARN lock renewal failed") && logged.has("WARN lock lost")
	})
}
