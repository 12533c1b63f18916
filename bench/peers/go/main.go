// Command go-peer is the Go sides of `make bench-peers` (bench/peers/): N clients
// in one process, each with a go-redis client (a pool) and a lock library of its
// own, looping acquire → hold → release on one lock. The library is -lib: redsync
// (redsync.go), bsm/redislock (bsm.go), or this repository's client (ours.go).
//
// It speaks the protocol of bench/peers/clients.py and bench/src/peer.rs: it prints
// `ready` once every client is connected, reads `go <t0> <t1> [first]` from stdin,
// runs from t0, and at t1 prints one JSON line per client and exits, wherever the
// clients are. With `first`, each client reports at its first grant instead (the
// dead-holder cell: how long until a waiter gets a lock whose holder was killed).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	goredislib "github.com/redis/go-redis/v9"
)

// record is what one client measured in [t0, t1].
type record struct {
	mu           sync.Mutex
	waitsUs      []float64
	heldS        float64
	waitingSince float64 // 0: not waiting
	holdingSince float64 // 0: not holding
	errors       int
}

type report struct {
	WaitsUs   []float64 `json:"waits_us"`
	PendingUs *float64  `json:"pending_us"`
	HeldS     float64   `json:"held_s"`
	Errors    int       `json:"errors"`
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func sleepUntil(at float64) {
	if left := at - now(); left > 0 {
		time.Sleep(time.Duration(left * 1e9))
	}
}

func (r *record) report(t1 float64) report {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.heldS
	if r.holdingSince != 0 {
		held += math.Max(0, t1-r.holdingSince)
	}
	out := report{WaitsUs: r.waitsUs, HeldS: held, Errors: r.errors}
	if out.WaitsUs == nil {
		out.WaitsUs = []float64{}
	}
	// A goroutine may go on past t1 before the report is printed: what it began
	// after t1 is not in the window.
	if r.waitingSince != 0 && r.waitingSince < t1 {
		pending := math.Round((t1-r.waitingSince)*1e7) / 10
		out.PendingUs = &pending
	}
	return out
}

// side is one client's lock, as its library's documentation shows it: acquire
// returns nil once the client holds it, errRetry when the library gave up waiting
// (the client asks again, and the wait goes on), or another error.
type side interface {
	acquire(ctx context.Context) error
	release(ctx context.Context) error
}

var errRetry = errors.New("the library gave up waiting")

func client(s side, hold time.Duration, t0, t1 float64, first bool, rec *record, done chan<- struct{}) {
	ctx := context.Background()
	sleepUntil(t0)
	for {
		asked := now()
		if asked > t1 {
			return
		}
		rec.mu.Lock()
		if rec.waitingSince == 0 {
			rec.waitingSince = asked
		}
		rec.mu.Unlock()
		if err := s.acquire(ctx); err != nil {
			if !errors.Is(err, errRetry) {
				rec.mu.Lock()
				rec.errors++
				rec.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		granted := now()
		if granted > t1 {
			// The report (printed a little after t1) counts this wait as open at t1.
			_ = s.release(ctx)
			return
		}
		rec.mu.Lock()
		rec.waitsUs = append(rec.waitsUs, math.Round((granted-rec.waitingSince)*1e7)/10)
		rec.waitingSince = 0
		rec.holdingSince = granted
		rec.mu.Unlock()
		if first {
			done <- struct{}{}
			return
		}
		if hold > 0 {
			time.Sleep(hold)
		}
		finished := now()
		rec.mu.Lock()
		rec.heldS += math.Min(finished, t1) - granted
		rec.holdingSince = 0
		rec.mu.Unlock()
		if err := s.release(ctx); err != nil {
			rec.mu.Lock()
			rec.errors++
			rec.mu.Unlock()
		}
	}
}

func main() {
	port := flag.Int("port", 6379, "redis-server port on 127.0.0.1")
	key := flag.String("key", "bench:peers", "the lock every client contends for")
	holdMs := flag.Int("hold-ms", 0, "how long each grant is held, ms")
	clients := flag.Int("clients", 1, "clients in this process")
	lib := flag.String("lib", "redsync", "the lock library: redsync, bsm or ours")
	tuned := flag.Bool("tuned", false, "redsync, bsm: retry every 1 ms without giving up")
	backend := flag.String("backend", "auto", "ours: the backend (auto, module, functions, scripts)")
	flag.Parse()

	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	probe := goredislib.NewClient(&goredislib.Options{Addr: addr})
	if err := probe.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "ping:", err)
		os.Exit(1)
	}
	_ = probe.Close()
	fmt.Println("ready")

	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 3 || fields[0] != "go" {
		fmt.Fprintf(os.Stderr, "expected `go <t0> <t1> [first]`, got %q\n", line)
		os.Exit(1)
	}
	t0, err0 := strconv.ParseFloat(fields[1], 64)
	t1, err1 := strconv.ParseFloat(fields[2], 64)
	if err0 != nil || err1 != nil {
		fmt.Fprintf(os.Stderr, "bad times in %q\n", line)
		os.Exit(1)
	}
	first := len(fields) > 3 && fields[3] == "first"

	records := make([]*record, *clients)
	done := make(chan struct{}, *clients)
	for i := range records {
		records[i] = &record{}
		rdb := goredislib.NewClient(&goredislib.Options{Addr: addr})
		var s side
		switch *lib {
		case "redsync":
			s = newRedsync(rdb, *key, *tuned)
		case "bsm":
			s = newBsm(rdb, *key, *tuned)
		case "ours":
			s, err = newOurs(rdb, *key, *backend)
		default:
			err = fmt.Errorf("-lib %q: expected redsync, bsm or ours", *lib)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go client(s, time.Duration(*holdMs)*time.Millisecond, t0, t1, first, records[i], done)
	}
	end := time.After(time.Duration(math.Max(0, t1-now()) * 1e9))
	for waiting := *clients; waiting > 0; waiting-- {
		select {
		case <-done:
			continue
		case <-end:
		}
		break
	}
	out := bufio.NewWriter(os.Stdout)
	for _, rec := range records {
		line, _ := json.Marshal(rec.report(t1))
		out.Write(append(line, '\n'))
	}
	out.Flush()
	os.Exit(0)
}
