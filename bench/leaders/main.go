// Command leaders is a failover benchmark of leader election: this repository's Go
// election (redislock.Election, on the module and on the function library) against
// etcd's client/v3/concurrency Election, on the same scenarios.
//
//	leaders drive -side module|functions|etcd -server ADDR -ttl 5s -rounds 5 -out results.jsonl
//	leaders report -in results.jsonl -out RESULTS.md
//	leaders candidate ...   (started by drive: one contender)
//	leaders ready -side S -addr ADDR    (waits until a server answers)
//	leaders ports N                     (prints N free loopback ports)
//
// The driver starts N candidate processes per scenario, each reaching the server
// through a TCP proxy of the driver's own, so that one candidate's network can be cut
// (a black hole: sockets stay open, every byte either way is dropped; at the heal the
// connections that lost bytes are closed, as after a long partition). Each candidate
// campaigns in a loop and prints JSON lines with wall-clock times (same machine, same
// clock): "campaign", "lead", "resign", "end". See run.sh and RESULTS.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"redis-lock/go/redislock"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leaders drive|report|candidate|ready|ports ...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "candidate":
		candidateMain(args)
	case "drive":
		driveMain(args)
	case "report":
		reportMain(args)
	case "ready":
		readyMain(args)
	case "ports":
		portsMain(args)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

// ---------------------------------------------------------------------------
// Helpers: free ports, readiness.

func portsMain(args []string) {
	n := 1
	if len(args) > 0 {
		n, _ = strconv.Atoi(args[0])
	}
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ls = append(ls, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
}

func readyMain(args []string) {
	fs := flag.NewFlagSet("ready", flag.ExitOnError)
	side := fs.String("side", "module", "module|functions|etcd")
	addr := fs.String("addr", "", "host:port")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after")
	_ = fs.Parse(args)
	deadline := time.Now().Add(*timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		if *side == "etcd" {
			var cli *clientv3.Client
			cli, err = clientv3.New(clientv3.Config{Endpoints: []string{*addr}, DialTimeout: time.Second,
				Logger: zap.NewNop()})
			if err == nil {
				_, err = cli.Get(ctx, "/ready")
				_ = cli.Close()
			}
		} else {
			c := redis.NewClient(&redis.Options{Addr: *addr})
			err = c.Ping(ctx).Err()
			_ = c.Close()
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "%s at %s did not answer in %v\n", *side, *addr, *timeout)
	os.Exit(1)
}

// ---------------------------------------------------------------------------
// Candidate: one contender, campaigning in a loop.

type event struct {
	Ev   string `json:"ev"`
	Term int64  `json:"term,omitempty"`
	At   int64  `json:"at"`
	Why  string `json:"why,omitempty"`
	Msg  string `json:"msg,omitempty"`

	cand int // set by the driver
}

var outMu sync.Mutex

func emit(e event) {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	outMu.Lock()
	_, _ = os.Stdout.Write(b)
	outMu.Unlock()
}

// commands reads "resign TERM" lines from stdin; EOF (the driver is gone) exits.
func commands() <-chan int64 {
	ch := make(chan int64, 8)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "resign" {
				if t, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					ch <- t
				}
			}
		}
		os.Exit(0)
	}()
	return ch
}

func candidateMain(args []string) {
	fs := flag.NewFlagSet("candidate", flag.ExitOnError)
	side := fs.String("side", "module", "module|functions|etcd")
	addr := fs.String("addr", "", "server (or proxy) host:port")
	ttl := fs.Duration("ttl", 5*time.Second, "leadership TTL")
	key := fs.String("key", "{leaders}", "election key (ours) or prefix (etcd)")
	name := fs.String("name", "c", "this candidate's value")
	_ = fs.Parse(args)
	resign := commands()
	emit(event{Ev: "start"})
	if *side == "etcd" {
		runEtcd(*addr, *ttl, *key, *name, resign)
	} else {
		runOurs(*side, *addr, *ttl, *key, *name, resign)
	}
}

// runOurs: campaign, lead until Leadership.Context ends (or told to resign), again.
func runOurs(side, addr string, ttl time.Duration, key, name string, resign <-chan int64) {
	backend := redislock.Module
	if side == "functions" {
		backend = redislock.Functions
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	locker := redislock.New(client, redislock.WithBackend(backend))
	election, err := locker.Election(key, ttl)
	if err != nil {
		emit(event{Ev: "err", Msg: err.Error()})
		os.Exit(1)
	}
	ctx := context.Background()
	for {
		emit(event{Ev: "campaign"})
		ld, err := election.Campaign(ctx, name)
		if err != nil {
			emit(event{Ev: "err", Msg: err.Error()})
			time.Sleep(100 * time.Millisecond)
			continue
		}
		term := ld.Term()
		emit(event{Ev: "lead", Term: term})
	leading:
		for {
			select {
			case <-ld.Context().Done():
				emit(event{Ev: "end", Term: term, Why: fmt.Sprint(context.Cause(ld.Context()))})
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = ld.Resign(rctx)
				cancel()
				break leading
			case t := <-resign:
				if t != term {
					continue
				}
				// It stops leading when it decides to resign, then hands over.
				now := time.Now().UnixNano()
				emit(event{Ev: "resign", Term: term, At: now})
				emit(event{Ev: "end", Term: term, At: now, Why: "resigned"})
				rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				if err := ld.Resign(rctx); err != nil {
					emit(event{Ev: "err", Msg: "resign: " + err.Error()})
				}
				cancel()
				break leading
			}
		}
	}
}

// runEtcd: a session (lease of TTL seconds, kept alive by the client), campaign
// with concurrency.Election, lead until session.Done() closes (etcd's documented
// signal that the lease is no longer kept alive) or told to resign, again.
func runEtcd(addr string, ttl time.Duration, prefix, name string, resign <-chan int64) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		emit(event{Ev: "err", Msg: err.Error()})
		os.Exit(1)
	}
	ttlSecs := int(math.Ceil(ttl.Seconds()))
	ctx := context.Background()
	for {
		// concurrency.NewSession(cli, concurrency.WithTTL(ttlSecs)) but with the
		// Grant bounded, so that a candidate cut off tries again after the heal.
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		grant, err := cli.Grant(gctx, int64(ttlSecs))
		cancel()
		if err != nil {
			emit(event{Ev: "err", Msg: "grant: " + err.Error()})
			time.Sleep(100 * time.Millisecond)
			continue
		}
		session, err := concurrency.NewSession(cli, concurrency.WithTTL(ttlSecs), concurrency.WithLease(grant.ID))
		if err != nil {
			emit(event{Ev: "err", Msg: "session: " + err.Error()})
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			if session.Ctx().Err() != nil {
				break
			}
			election := concurrency.NewElection(session, prefix)
			emit(event{Ev: "campaign"})
			if err := election.Campaign(session.Ctx(), name); err != nil {
				emit(event{Ev: "err", Msg: "campaign: " + err.Error()})
				if session.Ctx().Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			term := election.Rev()
			emit(event{Ev: "lead", Term: term})
			resigned := false
		leading:
			for {
				select {
				case <-session.Done():
					emit(event{Ev: "end", Term: term, Why: "session done"})
					break leading
				case t := <-resign:
					if t != term {
						continue
					}
					now := time.Now().UnixNano()
					emit(event{Ev: "resign", Term: term, At: now})
					emit(event{Ev: "end", Term: term, At: now, Why: "resigned"})
					rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					if err := election.Resign(rctx); err != nil {
						emit(event{Ev: "err", Msg: "resign: " + err.Error()})
					}
					cancel()
					resigned = true
					break leading
				}
			}
			if !resigned {
				break
			}
		}
		session.Orphan()
	}
}

// ---------------------------------------------------------------------------
// Proxy: one per candidate, can black-hole.

type pair struct {
	a, b  net.Conn
	dirty bool // bytes were dropped: the stream is broken, closed at the heal
}

type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	hole     bool
	pairs    map[*pair]struct{}
}

func newProxy(upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, pairs: map[*pair]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{a: c, b: s}
		p.mu.Lock()
		p.pairs[pr] = struct{}{}
		p.mu.Unlock()
		go p.pump(pr, c, s)
		go p.pump(pr, s, c)
	}
}

func (p *proxy) pump(pr *pair, from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole := p.hole
			if hole {
				pr.dirty = true
			}
			p.mu.Unlock()
			if !hole {
				if _, werr := to.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	_ = from.Close()
	_ = to.Close()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// cut drops every byte from now on, both ways, on every connection, new ones too.
func (p *proxy) cut() {
	p.mu.Lock()
	p.hole = true
	p.mu.Unlock()
}

// heal forwards again; the connections that lost bytes are closed.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = false
	for pr := range p.pairs {
		if pr.dirty {
			_ = pr.a.Close()
			_ = pr.b.Close()
		}
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.pairs {
		_ = pr.a.Close()
		_ = pr.b.Close()
	}
}

// ---------------------------------------------------------------------------
// Driver.

type cand struct {
	id     int
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	px     *proxy
	exited chan struct{}

	// under run.mu
	alive      bool
	killedAt   int64
	leading    bool
	term       int64
	leadAt     int64
	campaignAt int64 // last "campaign" not yet followed by lead/err; 0: none
	open       int   // index of the open interval, -1: none
}

type interval struct {
	Cand     string `json:"cand"`
	From, To int64
	Term     int64 `json:"term"`
}

type run struct {
	side, server, key, self string
	ttl                     time.Duration

	mu        sync.Mutex
	cands     []*cand
	events    []event
	intervals []interval
}

type episode struct {
	AtMs  float64  `json:"at_ms"` // from the scenario's start
	Ms    float64  `json:"ms"`
	Cands []string `json:"cands"`
}

type roundResult struct {
	Round   int     `json:"round"`
	OK      bool    `json:"ok"`
	Ms      float64 `json:"ms"` // action to the next "lead"
	From    string  `json:"from"`
	To      string  `json:"to,omitempty"`
	OldTerm int64   `json:"old_term"`
	NewTerm int64   `json:"new_term,omitempty"`
	// cut: the old leader's "end" minus the new leader's "lead" (negative: told
	// before), and from the cut.
	OldEndRelMs  *float64 `json:"old_end_rel_ms,omitempty"`
	OldEndCutMs  *float64 `json:"old_end_from_cut_ms,omitempty"`
	Note         string   `json:"note,omitempty"`
	StableWaitMs float64  `json:"stable_wait_ms"`
	PhaseMs      float64  `json:"phase_ms"` // random wait after stable, before a crash or cut
}

type scenarioResult struct {
	Side        string        `json:"side"`
	TTL         float64       `json:"ttl_s"`
	Scenario    string        `json:"scenario"`
	N           int           `json:"n"`
	Rounds      []roundResult `json:"rounds"`
	Leaderships int           `json:"leaderships"`
	OverlapMs   float64       `json:"overlap_ms"`
	Episodes    []episode     `json:"episodes"`
	TermsOK     bool          `json:"terms_increase"`
	DurationS   float64       `json:"duration_s"`
	Started     string        `json:"started"`
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

func atCleanup(f func()) {
	cleanupMu.Lock()
	cleanups = append(cleanups, f)
	cleanupMu.Unlock()
}

func cleanupAll() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "leaders: "+format+"\n", a...)
	cleanupAll()
	os.Exit(1)
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", a...)
}

func driveMain(args []string) {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	side := fs.String("side", "module", "module|functions|etcd")
	server := fs.String("server", "", "server host:port")
	ttl := fs.Duration("ttl", 5*time.Second, "leadership TTL")
	rounds := fs.Int("rounds", 5, "rounds per scenario")
	n := fs.Int("n", 3, "candidates")
	scenarios := fs.String("scenarios", "resign,crash,cut", "scenarios to run")
	out := fs.String("out", "results.jsonl", "results, appended (JSON lines)")
	_ = fs.Parse(args)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fatal("stopped by %v", s)
	}()
	self, err := os.Executable()
	if err != nil {
		fatal("%v", err)
	}
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fatal("%v", err)
	}
	defer f.Close()
	for _, sc := range strings.Split(*scenarios, ",") {
		res := runScenario(self, *side, *server, *ttl, sc, *rounds, *n)
		b, _ := json.Marshal(res)
		if _, err := f.Write(append(b, '\n')); err != nil {
			fatal("%v", err)
		}
		var ms []float64
		for _, r := range res.Rounds {
			if r.OK {
				ms = append(ms, r.Ms)
			}
		}
		med, mx := medMax(ms)
		logf("%s ttl=%v %s: %d/%d rounds, median %.0f ms, max %.0f ms, double-leader %.0f ms",
			*side, *ttl, sc, len(ms), len(res.Rounds), med, mx, res.OverlapMs)
	}
	cleanupAll()
}

func (r *run) start(name string) *cand {
	px, err := newProxy(r.server)
	if err != nil {
		fatal("proxy: %v", err)
	}
	cmd := exec.Command(r.self, "candidate", "-side", r.side, "-addr", px.addr(), "-ttl", r.ttl.String(),
		"-key", r.key, "-name", name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fatal("%v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fatal("%v", err)
	}
	if err := cmd.Start(); err != nil {
		fatal("start candidate: %v", err)
	}
	c := &cand{name: name, cmd: cmd, stdin: stdin, px: px, exited: make(chan struct{}), alive: true, open: -1}
	r.mu.Lock()
	c.id = len(r.cands)
	r.cands = append(r.cands, c)
	r.mu.Unlock()
	atCleanup(func() { r.kill(c) })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			e.cand = c.id
			r.ingest(c, e)
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c
}

func (r *run) ingest(c *cand, e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.killedAt != 0 && e.At > c.killedAt {
		return
	}
	r.events = append(r.events, e)
	switch e.Ev {
	case "campaign":
		c.campaignAt = e.At
	case "err":
		c.campaignAt = 0
		if !strings.HasPrefix(e.Msg, "resign") {
			logf("%s: %s", c.name, e.Msg)
		}
	case "lead":
		c.leading, c.term, c.leadAt, c.campaignAt = true, e.Term, e.At, 0
		c.open = len(r.intervals)
		r.intervals = append(r.intervals, interval{Cand: c.name, From: e.At, Term: e.Term})
	case "end":
		c.leading = false
		if c.open >= 0 {
			r.intervals[c.open].To = e.At
			c.open = -1
		}
	}
}

// kill SIGKILLs c (if alive), closes its leadership at that time, and its proxy.
func (r *run) kill(c *cand) int64 {
	r.mu.Lock()
	now := time.Now().UnixNano()
	wasAlive := c.alive
	if c.alive {
		c.alive, c.killedAt, c.leading, c.campaignAt = false, now, false, 0
		if c.open >= 0 {
			r.intervals[c.open].To = now
			c.open = -1
		}
	}
	r.mu.Unlock()
	if wasAlive {
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
		c.px.close()
	}
	return now
}

// waitFor polls cond (under r.mu) until true or timeout.
func (r *run) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// find is the first event pred accepts (under r.mu).
func (r *run) find(pred func(e event) bool) *event {
	for i := range r.events {
		if pred(r.events[i]) {
			e := r.events[i]
			return &e
		}
	}
	return nil
}

// stable: n alive, one leader leading for settle, every other one campaigning for
// settle (and since after needAfter, for a candidate healed from a cut).
func (r *run) stable(n int, settle time.Duration, need map[int]int64) *cand {
	now := time.Now().UnixNano()
	var leader *cand
	alive := 0
	for _, c := range r.cands {
		if !c.alive {
			continue
		}
		alive++
		if c.leading {
			if leader != nil {
				return nil
			}
			leader = c
			if now-c.leadAt < int64(settle) {
				return nil
			}
			continue
		}
		if c.campaignAt == 0 || now-c.campaignAt < int64(settle) || c.campaignAt <= need[c.id] {
			return nil
		}
	}
	if alive != n {
		return nil
	}
	return leader
}

func runScenario(self, side, server string, ttl time.Duration, scenario string, rounds, n int) scenarioResult {
	began := time.Now()
	stamp := began.UnixNano()
	key := fmt.Sprintf("{leaders-%s-%s-%d}", scenario, ttl, stamp)
	if side == "etcd" {
		key = fmt.Sprintf("/leaders/%s/%s/%d", scenario, ttl, stamp)
	}
	r := &run{side: side, server: server, key: key, self: self, ttl: ttl}
	res := scenarioResult{Side: side, TTL: ttl.Seconds(), Scenario: scenario, N: n,
		Started: began.UTC().Format(time.RFC3339)}
	next := 0
	startOne := func() *cand {
		next++
		return r.start(fmt.Sprintf("c%d", next))
	}
	for i := 0; i < n; i++ {
		startOne()
	}
	settle := 500 * time.Millisecond
	handover := 3*ttl + 5*time.Second
	need := map[int]int64{}
	for round := 1; round <= rounds; round++ {
		rr := roundResult{Round: round}
		var leader *cand
		waitStart := time.Now()
		ok := r.waitFor(4*ttl+10*time.Second, func() bool {
			leader = r.stable(n, settle, need)
			return leader != nil
		})
		if !ok {
			// A healed candidate that never said "campaign" again: go on without it.
			ok = r.waitFor(ttl+5*time.Second, func() bool {
				leader = r.stable(n, settle, nil)
				return leader != nil
			})
			if ok {
				rr.Note = "healed candidate not seen campaigning again"
			}
		}
		rr.StableWaitMs = float64(time.Since(waitStart)) / 1e6
		if !ok {
			rr.Note = "no stable leader"
			res.Rounds = append(res.Rounds, rr)
			logf("%s %v %s round %d: no stable leader", side, ttl, scenario, round)
			continue
		}
		need = map[int]int64{}
		r.mu.Lock()
		L, T := leader, leader.term
		r.mu.Unlock()
		if scenario != "resign" {
			// A crash or cut at a random point of the renewal cycle (ours renews every
			// TTL/3, etcd's session every TTL/3 after the last response): not always
			// just after the leader's grant.
			phase := time.Duration(rand.Int64N(int64(ttl / 3)))
			rr.PhaseMs = float64(phase) / 1e6
			time.Sleep(phase)
		}
		r.mu.Lock()
		still := L.alive && L.leading && L.term == T
		r.mu.Unlock()
		if !still {
			rr.Note = "leader changed before the action"
			res.Rounds = append(res.Rounds, rr)
			continue
		}
		rr.From, rr.OldTerm = L.name, T
		newLead := func(after int64, notFrom *cand) *event {
			var got *event
			r.waitFor(handover, func() bool {
				got = r.find(func(e event) bool {
					return e.Ev == "lead" && e.At > after && (notFrom == nil || e.cand != notFrom.id)
				})
				return got != nil
			})
			return got
		}
		fill := func(e *event, t0 int64) {
			if e == nil {
				rr.Note = "no new leader within " + handover.String()
				return
			}
			rr.OK, rr.Ms, rr.NewTerm = true, float64(e.At-t0)/1e6, e.Term
			r.mu.Lock()
			rr.To = r.cands[e.cand].name
			r.mu.Unlock()
		}
		switch scenario {
		case "resign":
			if _, err := fmt.Fprintf(L.stdin, "resign %d\n", T); err != nil {
				rr.Note = err.Error()
				break
			}
			var rs *event
			r.waitFor(5*time.Second, func() bool {
				rs = r.find(func(e event) bool { return e.Ev == "resign" && e.cand == L.id && e.Term == T })
				return rs != nil
			})
			if rs == nil {
				rr.Note = "leader did not resign"
				break
			}
			fill(newLead(rs.At, L), rs.At)
		case "crash":
			t0 := r.kill(L)
			fill(newLead(t0, L), t0)
			startOne()
		case "cut":
			t0 := time.Now().UnixNano()
			L.px.cut()
			e := newLead(t0, L)
			fill(e, t0)
			var end *event
			r.waitFor(handover, func() bool {
				end = r.find(func(x event) bool { return x.Ev == "end" && x.cand == L.id && x.Term == T })
				return end != nil
			})
			if end != nil {
				fromCut := float64(end.At-t0) / 1e6
				rr.OldEndCutMs = &fromCut
				if e != nil {
					rel := float64(end.At-e.At) / 1e6
					rr.OldEndRelMs = &rel
				}
			} else {
				rr.Note += " old leader never told"
			}
			healAt := time.Now().UnixNano()
			L.px.heal()
			need[L.id] = healAt
		}
		logf("%s %v %s round %d: %s -> %s %.1f ms %s", side, ttl, scenario, round, rr.From, rr.To, rr.Ms,
			relString(rr.OldEndRelMs))
		res.Rounds = append(res.Rounds, rr)
	}
	// Let the last handover's stragglers (an old leader's "end") arrive, then stop all.
	time.Sleep(300 * time.Millisecond)
	for _, c := range r.cands {
		r.kill(c)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Leaderships = len(r.intervals)
	res.OverlapMs, res.Episodes = overlap(r.intervals, stamp)
	res.TermsOK = termsIncrease(r.intervals)
	res.DurationS = time.Since(began).Seconds()
	return res
}

func relString(p *float64) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("(old leader's end %+.1f ms vs new lead)", *p)
}

// overlap: the total time two or more candidates each believed they led, and the
// episodes.
func overlap(ivs []interval, origin int64) (float64, []episode) {
	type pt struct {
		at    int64
		delta int
		cand  string
	}
	var pts []pt
	for _, iv := range ivs {
		to := iv.To
		if to == 0 {
			to = time.Now().UnixNano()
		}
		if to <= iv.From {
			continue
		}
		pts = append(pts, pt{iv.From, +1, iv.Cand}, pt{to, -1, iv.Cand})
	}
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].at != pts[j].at {
			return pts[i].at < pts[j].at
		}
		return pts[i].delta < pts[j].delta // ends before starts: touching is not overlapping
	})
	var total int64
	var eps []episode
	active := map[string]int{}
	count := 0
	var since int64
	for _, p := range pts {
		if count >= 2 {
			total += p.at - since
		}
		if p.delta > 0 && count == 1 {
			var names []string
			for k := range active {
				names = append(names, k)
			}
			names = append(names, p.cand)
			eps = append(eps, episode{AtMs: float64(p.at-origin) / 1e6, Cands: names})
		}
		count += p.delta
		active[p.cand] += p.delta
		if active[p.cand] == 0 {
			delete(active, p.cand)
		}
		if p.delta < 0 && count == 1 && len(eps) > 0 {
			e := &eps[len(eps)-1]
			e.Ms = float64(p.at-origin)/1e6 - e.AtMs
		}
		since = p.at
	}
	return float64(total) / 1e6, eps
}

func termsIncrease(ivs []interval) bool {
	s := append([]interval(nil), ivs...)
	sort.Slice(s, func(i, j int) bool { return s[i].From < s[j].From })
	for i := 1; i < len(s); i++ {
		if s[i].Term <= s[i-1].Term {
			return false
		}
	}
	return true
}

func medMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m, s[len(s)-1]
}

// ---------------------------------------------------------------------------
// Report.

func reportMain(args []string) {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	in := fs.String("in", "results.jsonl", "results (JSON lines)")
	out := fs.String("out", "RESULTS.md", "markdown to write")
	notes := fs.String("notes", "", "a file of lines to add under Setup (versions)")
	command := fs.String("command", "bench/leaders/run.sh", "the command that reproduces")
	_ = fs.Parse(args)
	data, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	type cfg struct {
		side string
		ttl  float64
	}
	byCfg := map[cfg]map[string]scenarioResult{}
	var order []cfg
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var s scenarioResult
		if json.Unmarshal([]byte(line), &s) != nil {
			continue
		}
		k := cfg{s.Side, s.TTL}
		if byCfg[k] == nil {
			byCfg[k] = map[string]scenarioResult{}
			order = append(order, k)
		}
		byCfg[k][s.Scenario] = s
	}
	sideName := map[string]string{"module": "ours-module", "functions": "ours-functions", "etcd": "etcd"}
	sort.SliceStable(order, func(i, j int) bool {
		rank := map[string]int{"module": 0, "functions": 1, "etcd": 2}
		if order[i].ttl != order[j].ttl {
			return order[i].ttl == 5 || (order[j].ttl != 5 && order[i].ttl < order[j].ttl)
		}
		return rank[order[i].side] < rank[order[j].side]
	})
	secs := func(ms float64) string {
		if math.IsNaN(ms) {
			return "—"
		}
		if math.Abs(ms) < 1000 {
			return fmt.Sprintf("%.0f ms", ms)
		}
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	cell := func(s scenarioResult, ok bool) string {
		if !ok {
			return "not run"
		}
		var ms []float64
		for _, r := range s.Rounds {
			if r.OK {
				ms = append(ms, r.Ms)
			}
		}
		med, mx := medMax(ms)
		c := fmt.Sprintf("%s / %s", secs(med), secs(mx))
		if len(ms) != len(s.Rounds) {
			c += fmt.Sprintf(" (%d of %d rounds)", len(ms), len(s.Rounds))
		}
		return c
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Leader election failover: ours (module, functions) vs etcd vs client-go\n\n")
	w("Generated by `bench/leaders/run.sh` on %s. Reproduce: `%s` (from the repository root;\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), *command)
	w("it installs nothing: etcd comes from `apt-get install -y etcd-server`).\n\n")
	w("N = 3 candidates per scenario, separate processes, each through its own TCP proxy; times are\n")
	w("wall-clock `time.Now()` stamps of the candidates and the driver (one machine, one clock).\n")
	w("Each cell: **median / max** over the rounds. All figures in the ours/etcd rows are **measured**;\n")
	w("the client-go row is **derived** (computed from its defaults and code, not run).\n\n")
	w("| side | TTL | rounds | resign → new leader | crash (SIGKILL) → new leader | cut (black hole) → new leader | cut: old leader told vs new lead (median / worst) | double-leader window (total, all scenarios) | kind |\n")
	w("|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		m := byCfg[k]
		rs, okR := m["resign"]
		cr, okC := m["crash"]
		cu, okU := m["cut"]
		rounds := 0
		for _, s := range m {
			rounds = max(rounds, len(s.Rounds))
		}
		told := "not run"
		if okU {
			var rel []float64
			never := 0
			for _, r := range cu.Rounds {
				if r.OldEndRelMs != nil {
					rel = append(rel, *r.OldEndRelMs)
				} else if r.OK {
					never++
				}
			}
			if len(rel) > 0 {
				med, _ := medMax(rel)
				worst := rel[0]
				for _, x := range rel {
					worst = max(worst, x)
				}
				desc := func(x float64) string {
					if x <= 0 {
						return secs(-x) + " before"
					}
					return "**" + secs(x) + " after**"
				}
				before := 0
				for _, x := range rel {
					if x <= 0 {
						before++
					}
				}
				told = fmt.Sprintf("%s / %s (%d of %d rounds before)", desc(med), desc(worst), before, len(rel))
			}
			if never > 0 {
				told += fmt.Sprintf("; never told in %d rounds", never)
			}
		}
		total := 0.0
		var parts []string
		for _, sc := range []string{"resign", "crash", "cut"} {
			if s, ok := m[sc]; ok {
				total += s.OverlapMs
				if s.OverlapMs > 0 {
					parts = append(parts, fmt.Sprintf("%s: %s in %d episodes", sc, secs(s.OverlapMs), len(s.Episodes)))
				}
			}
		}
		dl := secs(total)
		if total == 0 {
			dl = "0"
		}
		if len(parts) > 0 {
			dl = "**" + dl + "** (" + strings.Join(parts, "; ") + ")"
		}
		w("| %s | %g s | %d | %s | %s | %s | %s | %s | measured |\n", sideName[k.side], k.ttl, rounds,
			cell(rs, okR), cell(cr, okC), cell(cu, okU), told, dl)
	}
	w("| client-go leaderelection (defaults) | LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s, ReleaseOnCancel | — | 0 – 4.4 s (next follower poll) | ≈ 13 – 23.8 s (typ. ≈ 17 s) | ≈ 13 – 23.8 s | old leader stops at last renewal + 12 s; new leader ≥ last renewal + 15 s: ≈ 3 – 11.8 s before | 0 with sane clocks; **possible** with clock-rate skew or pauses (no fencing) | derived |\n")
	w("\n")
	if *notes != "" {
		if nb, err := os.ReadFile(*notes); err == nil {
			w("## Setup\n\n%s\n", strings.TrimSpace(string(nb)))
			w("\n")
		}
	}
	b.WriteString(methodNotes)
	w("\n## Per round (measured)\n\n")
	w("`ms`: action → next lead. Cut: `old end` = the cut leader's end − the new leader's lead (negative: told before).\n\n")
	for _, k := range order {
		for _, sc := range []string{"resign", "crash", "cut"} {
			s, ok := byCfg[k][sc]
			if !ok {
				continue
			}
			w("- %s, TTL %g s, %s (%.0f s, %d leaderships, terms increase: %v): ", sideName[k.side], k.ttl, sc,
				s.DurationS, s.Leaderships, s.TermsOK)
			var items []string
			for _, r := range s.Rounds {
				it := "fail"
				if r.OK {
					it = fmt.Sprintf("%.0f", r.Ms)
				}
				if r.OldEndRelMs != nil {
					it += fmt.Sprintf(" (old end %+.0f)", *r.OldEndRelMs)
				}
				if r.Note != "" {
					it += " [" + strings.TrimSpace(r.Note) + "]"
				}
				items = append(items, it)
			}
			w("%s ms", strings.Join(items, ", "))
			if len(s.Episodes) > 0 {
				var es []string
				for _, e := range s.Episodes {
					es = append(es, fmt.Sprintf("%.0f ms (%s)", e.Ms, strings.Join(e.Cands, "+")))
				}
				w("; double leaders: %s", strings.Join(es, ", "))
			}
			w("\n")
		}
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const methodNotes = `## Method

- **resign**: the driver tells the leader (stdin) to resign; it stops leading ("end") and calls
  Resign at the same instant ("resign"); measured from there to the next candidate's "lead".
  Ours: ` + "`Leadership.Resign`" + ` (marks the record, releases: the queue's next leads). etcd: ` + "`Election.Resign`" + ` (deletes the key).
- **crash**: SIGKILL of the leader's process; from the kill to the next "lead". A fresh candidate
  replaces it.
- **cut**: the leader's proxy drops every byte both ways (sockets kept open); from the cut to the next
  "lead"; the cut leader's "end" is when it is told it no longer leads. Healed after both were seen
  (connections that lost bytes are closed then).
- **double-leader window**: over each scenario's whole run, the time during which the [lead, end]
  intervals of two different candidates overlap (a killed leader's interval ends at the kill).
- A round starts when one leader has led ≥ 0.5 s and every other candidate has been campaigning ≥ 0.5 s;
  a crash or cut then waits a random 0 – TTL/3 more (both sides renew every TTL/3), so that it falls
  anywhere in the renewal cycle.
- What a leader watches: ours, ` + "`Leadership.Context()`" + ` (ends at the lease's local deadline, before
  the server can grant anyone else); etcd, ` + "`session.Done()`" + ` of its ` + "`concurrency.NewSession(cli, WithTTL(5))`" + ` (the
  lease's keep-alive channel, closed by the client's deadline loop, checked once a second, one TTL
  after the last keep-alive response). The etcd server revokes an expired lease (its own timer, checked
  every 500 ms), which deletes the leader key and lets the next candidate's Campaign return.
  So etcd's leader-side signal has no margin: the client's deadline is (keep-alive *response* + TTL,
  seen up to 1 s late), the server's is (keep-alive *request* + TTL, acted on within 500 ms): a cut
  etcd leader can hear of its loss after its successor leads. etcd's answer is fencing writes with
  the leader key's revision in a Txn (Election.Key()/Rev()), which this benchmark does not exercise.
  Ours ends the lease at (renewal *sent* + TTL − 10 %, at least 50 ms), on a timer of its own.
- client-go (derived from ` + "`tools/leaderelection/leaderelection.go`" + `): followers poll every RetryPeriod
  with JitterUntil(factor 1.2, sliding): every 2 – 4.4 s. A follower counts LeaseDuration from the
  moment *it* saw the record change (observedTime), not from renewTime. Leader renews every 2 s;
  a renewal round has RenewDeadline (10 s) starting RetryPeriod after the last success.
  - resign (ReleaseOnCancel): the record is rewritten with an empty holder; a follower takes it at
    its next poll: 0 – 4.4 s (with two followers, the sooner of two).
  - crash: last renewal r, crash c ∈ [r, r + 2 s); a follower sees the change at o ∈ (r, r + 4.4 s),
    the lease is expired from o + 15 s and taken at its next poll, o + 15 s + [0, 4.4 s): from the crash
    13 – 23.8 s.
  - cut: the same for the new leader; the old leader's renew round started at r + 2 s and gives up at
    r + 12 s (OnStoppedLeading), ≥ 3 s before any follower can lead, if clocks run at the same rate
    and nothing pauses. Its package doc: "does not guarantee that only one client is acting as a
    leader (a.k.a. fencing)"; tolerant to clock skew but not to skew *rate* beyond
    LeaseDuration/RenewDeadline = 1.5.
`
