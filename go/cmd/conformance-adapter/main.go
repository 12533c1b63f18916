// Command conformance-adapter drives the Go client for the conformance suite
// (conformance/ADAPTER.md): one process is one actor of a scenario, speaking JSON
// lines on stdin and stdout. It uses the client as its users do: a Locker on a
// go-redis client, Acquire with a context it cancels for `cancel`, the lock's
// context for the loss, for `check` the lock's Context().Err(), the check
// docs/go-client.md shows before a write, for `guard` the lock's Guard, and for
// `fence_postgres` its FencePostgres on a database/sql transaction (lib/pq's
// driver, a dependency of this command alone: the package needs none).
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/lib/pq" // database/sql's "postgres" driver
	"github.com/redis/go-redis/v9"

	"redis-lock/go/redislock"
)

type request struct {
	ID        int64    `json:"id"`
	Op        string   `json:"op"`
	URL       string   `json:"url"`
	Cluster   []string `json:"cluster"`
	Username  string   `json:"username"`
	Password  string   `json:"password"`
	Backend   string   `json:"backend"`
	Lock      string   `json:"lock"`
	Key       string   `json:"key"`
	TTLMs     int64    `json:"ttl_ms"`
	Kind      string   `json:"kind"`
	Limit     int64    `json:"limit"`
	Wait      string   `json:"wait"`
	WaitMs    int64    `json:"wait_ms"`
	Owner     *string  `json:"owner"`
	Target    int64    `json:"target"`
	TimeoutMs int64    `json:"timeout_ms"`
	AfterMs   int64    `json:"after_ms"`
	Value     string   `json:"value"`
	Resource  string   `json:"resource"`
	Postgres  string   `json:"postgres"`
	Observer  string   `json:"observer"`
}

// failure is a request's error reply.
type failure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

type adapter struct {
	out   *bufio.Writer
	outMu sync.Mutex

	mu       sync.Mutex
	client   redis.UniversalClient
	locker   *redislock.Locker
	postgres *sql.DB // nil: the scenario writes nothing there
	locks    map[string]*redislock.Lock
	leading  map[string]*redislock.Leadership
	inflight map[int64]*running
}

// running is a request under way: how to cancel it, and when it answered.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func main() {
	a := &adapter{out: bufio.NewWriter(os.Stdout), locks: map[string]*redislock.Lock{},
		leading: map[string]*redislock.Leadership{}, inflight: map[int64]*running{}}
	a.write(map[string]any{"hello": map[string]any{
		"protocol": 1,
		"client":   "redis-lock (Go)",
		"version":  "0.1.0",
		"capabilities": []string{"module", "functions", "scripts", "force_backend", "cluster", "auth",
			"owner", "shared", "limit", "wait", "wait_forever", "cancel", "extend", "info", "leader", "check", "guard",
			"fence_postgres", "loss_events", "loss_cause"},
		"constants": map[string]any{
			"renewal_divisor":           redislock.RenewalDivisor,
			"lease_margin_percent":      redislock.LeaseMarginPercent,
			"lease_margin_min_ms":       redislock.LeaseMarginMin.Milliseconds(),
			"wait_margin_ms":            redislock.WaitMargin.Milliseconds(),
			"withdraw_after_timeout_ms": redislock.WithdrawAfterTimeout.Milliseconds(),
			"release_limit_ms":          redislock.ReleaseLimit.Milliseconds(),
			"control_limit_ms":          redislock.ControlLimit.Milliseconds(),
			"library_version":           redislock.LibraryVersion,
			"min_library_version":       redislock.MinLibraryVersion,
		},
	}})
	in := bufio.NewReader(os.Stdin)
	var wg sync.WaitGroup
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var r request
			if jerr := json.Unmarshal(line, &r); jerr != nil || r.ID <= 0 {
				fmt.Fprintf(os.Stderr, "bad line %q: %v\n", line, jerr)
			} else if r.Op == "close" {
				finish(&wg, redislock.ReleaseLimit)
				a.close()
				a.reply(r.ID, map[string]any{}, nil)
				os.Exit(0)
			} else {
				wg.Add(1)
				a.start(&r, &wg)
			}
		}
		if err != nil {
			if err != io.EOF {
				fmt.Fprintln(os.Stderr, "stdin:", err)
			}
			break
		}
	}
	a.close()
	os.Exit(0)
}

// finish waits for the requests under way, at most limit.
func finish(wg *sync.WaitGroup, limit time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// start runs r in a goroutine of its own (requests overlap), `open` first.
func (a *adapter) start(r *request, wg *sync.WaitGroup) {
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{cancel: cancel, done: make(chan struct{})}
	a.mu.Lock()
	a.inflight[r.ID] = run
	a.mu.Unlock()
	handle := func() {
		defer wg.Done()
		defer func() {
			cancel()
			a.mu.Lock()
			delete(a.inflight, r.ID)
			a.mu.Unlock()
			close(run.done)
		}()
		ok, err := a.handle(ctx, r)
		a.reply(r.ID, ok, err)
	}
	if r.Op == "open" {
		handle() // before anything else is read
		return
	}
	go handle()
}

func (a *adapter) handle(ctx context.Context, r *request) (any, error) {
	if r.Op == "open" {
		return a.open(ctx, r)
	}
	a.mu.Lock()
	locker := a.locker
	a.mu.Unlock()
	if locker == nil && r.Op != "cancel" {
		return nil, badRequest("no open before " + r.Op)
	}
	switch r.Op {
	case "acquire":
		return a.acquire(ctx, locker, r)
	case "release":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		err = lock.Release(ctx)
		if errors.Is(err, redislock.ErrNotHeld) {
			return map[string]any{"released": false}, nil
		}
		return map[string]any{"released": err == nil}, err
	case "extend":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		err = lock.Extend(ctx, duration(r.TTLMs, "ttl_ms"))
		if errors.Is(err, redislock.ErrNotHeld) {
			return map[string]any{"extended": false}, nil
		}
		return map[string]any{"extended": err == nil}, err
	case "token":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		out := map[string]any{"token": strconv.FormatInt(lock.Token(), 10), "owner": lock.Owner(), "lost": false}
		if cause, lost := lossCause(lock); lost {
			out["lost"], out["cause"] = true, cause
		}
		return out, nil
	case "check":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		// The check docs/go-client.md shows before a write, made from a timer as
		// work under the lock reaches its write.
		if err := after(ctx, r.AfterMs); err != nil {
			return nil, err
		}
		return map[string]any{"held": lock.Context().Err() == nil}, nil
	case "guard":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		if err := after(ctx, r.AfterMs); err != nil {
			return nil, err
		}
		if err := lock.Guard(ctx, []string{r.Key}, "SET", r.Key, r.Value).Err(); err != nil {
			return nil, err
		}
		return map[string]any{"written": true}, nil
	case "fence_postgres":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		db := a.postgres
		a.mu.Unlock()
		if db == nil {
			return nil, badRequest("fence_postgres without a postgres URL in open")
		}
		if err := after(ctx, r.AfterMs); err != nil {
			return nil, err
		}
		if err := writeFenced(ctx, db, lock, r.Resource, r.Value); err != nil {
			return nil, err
		}
		return map[string]any{"written": true}, nil
	case "await_lost":
		lock, err := a.lock(r.Lock)
		if err != nil {
			return nil, err
		}
		select {
		case <-lock.Context().Done():
		case <-time.After(duration(r.TimeoutMs, "timeout_ms")):
		}
		if cause, lost := lossCause(lock); lost {
			return map[string]any{"lost": true, "cause": cause}, nil
		}
		return map[string]any{"lost": false}, nil
	case "cancel":
		a.mu.Lock()
		target := a.inflight[r.Target]
		a.mu.Unlock()
		if target != nil {
			target.cancel()
			<-target.done
		}
		return map[string]any{}, nil
	case "info":
		info, err := locker.Info(ctx, r.Key)
		if err != nil || info == nil {
			return map[string]any{"info": nil}, err
		}
		holders := []map[string]any{}
		for _, h := range info.Holders {
			holders = append(holders, map[string]any{"owner": h.Owner, "token": strconv.FormatInt(h.Token, 10),
				"ttl_ms": h.TTL.Milliseconds()})
		}
		return map[string]any{"info": map[string]any{"mode": info.Mode, "waiters": info.Waiters,
			"holders": holders}}, nil
	case "campaign":
		election, err := locker.Election(r.Key, duration(r.TTLMs, "ttl_ms"))
		if err != nil {
			return nil, err
		}
		ld, err := election.Campaign(ctx, r.Value)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		a.locks[r.Lock] = ld.Lock()
		a.leading[r.Lock] = ld
		a.mu.Unlock()
		go a.watch(r.Lock, ld.Lock())
		return map[string]any{"acquired": true, "token": strconv.FormatInt(ld.Term(), 10),
			"owner": ld.Lock().Owner()}, nil
	case "resign":
		a.mu.Lock()
		ld := a.leading[r.Lock]
		delete(a.leading, r.Lock)
		a.mu.Unlock()
		if ld == nil {
			return nil, badRequest("no leadership " + r.Lock)
		}
		err := ld.Resign(ctx)
		if errors.Is(err, redislock.ErrNotHeld) {
			return map[string]any{"resigned": false}, nil
		}
		return map[string]any{"resigned": err == nil}, err
	case "leader":
		election, err := locker.Election(r.Key, time.Second)
		if err != nil {
			return nil, err
		}
		leader, err := election.Leader(ctx)
		if err != nil || leader == nil {
			return map[string]any{"leader": nil}, err
		}
		return map[string]any{"leader": map[string]any{"term": strconv.FormatInt(leader.Term, 10),
			"value": leader.Value}}, nil
	case "observe":
		election, err := locker.Election(r.Key, time.Second)
		if err != nil {
			return nil, err
		}
		// Positioned when Observe returns; read for the rest of the process.
		leaders := election.Observe(context.Background())
		go func() {
			for leader := range leaders {
				a.write(map[string]any{"event": "leader", "observer": r.Observer,
					"term": strconv.FormatInt(leader.Term, 10), "value": leader.Value})
			}
		}()
		return map[string]any{}, nil
	}
	return nil, &failure{Kind: "unsupported", Message: "unknown op " + r.Op}
}

// after waits ms milliseconds from now (the request's arrival) on a timer, as
// work under a lock reaches its write.
func after(ctx context.Context, ms int64) error {
	if ms <= 0 {
		return nil
	}
	timer := time.NewTimer(duration(ms, "after_ms"))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeFenced is one transaction: the lock's fence for resource, then the write
// (ADAPTER.md, fence_postgres), committed; rolled back on any error.
func writeFenced(ctx context.Context, db *sql.DB, lock *redislock.Lock, resource, value string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after a commit, a no-op
	if err := lock.FencePostgres(ctx, tx, resource); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO conformance_writes (resource, value) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`, resource, value); err != nil {
		return err
	}
	return tx.Commit()
}

// preferTLS is a PostgreSQL URL with sslmode=prefer unless it names a mode: lib/pq
// asks for TLS by default, which the harness's server does not offer.
func preferTLS(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Query().Has("sslmode") {
		return raw
	}
	query := u.Query()
	query.Set("sslmode", "prefer")
	u.RawQuery = query.Encode()
	return u.String()
}

func (a *adapter) open(ctx context.Context, r *request) (any, error) {
	backend, err := redislock.ParseBackend(r.Backend)
	if r.Backend == "" {
		backend, err = redislock.Auto, nil
	}
	if err != nil {
		return nil, badRequest(err.Error())
	}
	var client redis.UniversalClient
	if len(r.Cluster) > 0 {
		var addrs []string
		for _, seed := range r.Cluster {
			u, err := url.Parse(seed)
			if err != nil {
				return nil, badRequest(err.Error())
			}
			addrs = append(addrs, u.Host)
		}
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: r.Username,
			Password: r.Password})
	} else {
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, badRequest(err.Error())
		}
		if r.Username != "" || r.Password != "" {
			opt.Username, opt.Password = r.Username, r.Password
		}
		client = redis.NewClient(opt)
	}
	var postgres *sql.DB
	if r.Postgres != "" {
		// Connects on first use.
		if postgres, err = sql.Open("postgres", preferTLS(r.Postgres)); err != nil {
			_ = client.Close()
			return nil, badRequest("postgres: " + err.Error())
		}
	}
	locker := redislock.New(client, redislock.WithBackend(backend))
	found, err := locker.Backend(ctx)
	if err != nil {
		_ = locker.Close()
		_ = client.Close()
		if postgres != nil {
			_ = postgres.Close()
		}
		return nil, err
	}
	a.mu.Lock()
	a.client, a.locker, a.postgres = client, locker, postgres
	a.mu.Unlock()
	return map[string]any{"backend": found.String()}, nil
}

func (a *adapter) acquire(ctx context.Context, locker *redislock.Locker, r *request) (any, error) {
	var opts []redislock.AcquireOption
	switch r.Kind {
	case "", "exclusive":
	case "shared":
		opts = append(opts, redislock.Shared())
	case "limit":
		opts = append(opts, redislock.Limit(r.Limit))
	default:
		return nil, badRequest("kind " + r.Kind)
	}
	if r.Owner != nil {
		opts = append(opts, redislock.WithOwner(*r.Owner))
	}
	ttl := duration(r.TTLMs, "ttl_ms")
	var lock *redislock.Lock
	var err error
	switch r.Wait {
	case "", "none":
		lock, err = locker.TryAcquire(ctx, r.Key, ttl, opts...)
	case "ms":
		opts = append(opts, redislock.WaitFor(duration(r.WaitMs, "wait_ms")))
		lock, err = locker.Acquire(ctx, r.Key, ttl, opts...)
	case "forever":
		lock, err = locker.Acquire(ctx, r.Key, ttl, opts...)
	default:
		return nil, badRequest("wait " + r.Wait)
	}
	if errors.Is(err, redislock.ErrNotObtained) {
		return map[string]any{"acquired": false}, nil
	}
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.locks[r.Lock] = lock
	a.mu.Unlock()
	go a.watch(r.Lock, lock)
	return map[string]any{"acquired": true, "token": strconv.FormatInt(lock.Token(), 10), "owner": lock.Owner()}, nil
}

// duration is ms milliseconds as a time.Duration, the unit of the client's API.
// A Duration holds at most 2^63-1 ns (about 292 years, 9223372036854 ms), less than
// the 2^62-1 ms the protocol allows: a longer value is sent as the longest
// Duration, the longest TTL or wait a Go user can ask for (said on stderr), rather
// than wrapping around to another value.
func duration(ms int64, field string) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		fmt.Fprintf(os.Stderr, "%s %d ms is beyond a time.Duration: sent as the longest one, %v\n", field, ms,
			time.Duration(math.MaxInt64))
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// watch writes the `lost` event as soon as the lock's context says so.
func (a *adapter) watch(name string, lock *redislock.Lock) {
	<-lock.Context().Done()
	cause, lost := lossCause(lock)
	if !lost {
		return // released
	}
	a.write(map[string]any{"event": "lost", "lock": name, "cause": cause,
		"message": context.Cause(lock.Context()).Error()})
}

// lossCause is the protocol's name of why lock was lost, if it was.
func lossCause(lock *redislock.Lock) (string, bool) {
	var lost *redislock.LostError
	if !errors.As(context.Cause(lock.Context()), &lost) {
		return "", false
	}
	switch lost.Reason {
	case redislock.Refused:
		return "refused", true
	case redislock.Fenced:
		return "fenced", true
	}
	return "lease_ran_out", true
}

func (a *adapter) lock(name string) (*redislock.Lock, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lock := a.locks[name]
	if lock == nil {
		return nil, badRequest("unknown lock " + name)
	}
	return lock, nil
}

func (a *adapter) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.locker != nil {
		_ = a.locker.Close()
		_ = a.client.Close()
	}
	if a.postgres != nil {
		_ = a.postgres.Close()
	}
}

func (a *adapter) reply(id int64, ok any, err error) {
	if err != nil {
		a.write(map[string]any{"id": id, "error": kindOf(err)})
		return
	}
	a.write(map[string]any{"id": id, "ok": ok})
}

func (a *adapter) write(line any) {
	data, err := json.Marshal(line)
	if err != nil {
		fmt.Fprintln(os.Stderr, "json:", err)
		return
	}
	a.outMu.Lock()
	defer a.outMu.Unlock()
	_, _ = a.out.Write(append(data, '\n'))
	_ = a.out.Flush()
}

func (f *failure) Error() string { return f.Message }

func badRequest(message string) error { return &failure{Kind: "bad_request", Message: message} }

// kindOf is the protocol's error of err.
func kindOf(err error) *failure {
	var f *failure
	if errors.As(err, &f) {
		return f
	}
	var version *redislock.LibraryVersionError
	var reply redis.Error
	kind := "other"
	switch {
	case errors.Is(err, context.Canceled):
		kind = "cancelled"
	case errors.Is(err, redislock.ErrUnanswered):
		kind = "wait_unanswered"
	case errors.As(err, &version) && (version.Found < version.Min || version.Lacks != ""):
		kind = "library_too_old"
	case errors.As(err, &version):
		kind = "library_too_new"
	case errors.Is(err, redislock.ErrNoBackend):
		kind = "no_backend"
	case errors.Is(err, redislock.ErrInvalidArgument):
		kind = "invalid_argument"
	case errors.Is(err, redislock.ErrFenced):
		kind = "fenced"
	case errors.Is(err, redislock.ErrLockLost), errors.Is(err, redislock.ErrReleased):
		kind = "lock_lost" // refused before sending: the client knows it no longer holds it
	case errors.As(err, &reply) && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		kind = "wrong_type"
	case errors.As(err, &reply):
		kind = "server"
	default:
		var netErr interface{ Timeout() bool }
		if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, context.DeadlineExceeded) {
			kind = "connection"
		}
	}
	return &failure{Kind: kind, Message: err.Error()}
}
