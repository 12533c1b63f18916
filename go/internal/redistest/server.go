// Package redistest starts real redis-servers for the tests: on free loopback
// ports, each in a directory of its own, stopped when the test ends (also when it
// fails). A server is "module" (the redis-lock module loaded: REDIS_LOCK_MODULE, or
// the repository's debug build, target/debug/libredis_lock.so, which `make test`
// builds first), "functions" (a plain server with the redislock library loaded by
// FUNCTION LOAD) or "plain" (nothing: the client sends the library as a script).
// REDIS_SERVER names another server binary. No mocks: the tests talk to these.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is what a server carries: the module, the library, or nothing.
type Kind string

const (
	Module    Kind = "module"
	Functions Kind = "functions"
	Plain     Kind = "plain"
)

// Root is the repository.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// ModulePath is the module file under test.
func ModulePath(t testing.TB) string {
	if path := os.Getenv("REDIS_LOCK_MODULE"); path != "" {
		return path
	}
	path := filepath.Join(Root(), "target", "debug", "libredis_lock.so")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: build it (cargo build --lib -p redis-lock, or make test) or set "+
			"REDIS_LOCK_MODULE", path)
	}
	return path
}

// Library is the repository's lua/redislock.lua.
func Library(t testing.TB) string {
	source, err := os.ReadFile(filepath.Join(Root(), "lua", "redislock.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(source)
}

// Server is a running redis-server.
type Server struct {
	t      testing.TB
	Kind   Kind
	Port   int
	Binary string
	dir    string
	args   []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Options shape a server.
type Options struct {
	// Binary is the server to run (default: REDIS_SERVER, or redis-server).
	Binary string
	// Settings are extra `--name value` pairs.
	Settings []string
}

// Start starts a server of kind k, stopped when the test ends.
func Start(t testing.TB, k Kind) *Server {
	return StartWith(t, k, Options{})
}

// StartWith starts a server of kind k with opts.
func StartWith(t testing.TB, k Kind, opts Options) *Server {
	t.Helper()
	binary := opts.Binary
	if binary == "" {
		binary = os.Getenv("REDIS_SERVER")
	}
	if binary == "" {
		binary = "redis-server"
	}
	s := &Server{t: t, Kind: k, Binary: binary, dir: t.TempDir()}
	clustered := false
	for i := 0; i+1 < len(opts.Settings); i += 2 {
		clustered = clustered || (opts.Settings[i] == "--cluster-enabled" && opts.Settings[i+1] == "yes")
	}
	var err error
	for try := 0; try < 20; try++ {
		s.Port = freePort(t)
		if clustered && (s.Port > 55000 || !portFree(s.Port+10000)) {
			continue
		}
		s.args = []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.dir,
			"--save", "", "--appendonly", "no", "--logfile", "redis.log"}
		if k == Module {
			s.args = append(s.args, "--loadmodule", ModulePath(t))
		}
		for _, setting := range opts.Settings {
			s.args = append(s.args, setting)
		}
		if err = s.spawn(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redis-server did not start: %v\n%s", err, s.Log())
	}
	t.Cleanup(s.Kill)
	if k == Functions {
		s.LoadLibrary(Library(t))
	}
	return s
}

// spawn runs the server and waits until it answers PING.
func (s *Server) spawn() error {
	cmd := exec.Command(s.Binary, s.args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		con, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			continue
		}
		_ = con.SetDeadline(time.Now().Add(time.Second))
		_, _ = con.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(con).ReadString('\n')
		_ = con.Close()
		if strings.HasPrefix(line, "+PONG") {
			return nil
		}
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("no PONG within 20 s")
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Client is a plain go-redis client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on a connection of its own and fails the test on an error.
func (s *Server) Do(args ...any) any {
	s.t.Helper()
	reply, err := s.Query(args...)
	if err != nil && err != redis.Nil {
		s.t.Fatalf("%v: %v", args, err)
	}
	return reply
}

// Query runs one command on a connection of its own.
func (s *Server) Query(args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	return c.Do(context.Background(), args...).Result()
}

// LoadLibrary loads source as the redislock library (FUNCTION LOAD REPLACE).
func (s *Server) LoadLibrary(source string) {
	s.Do("FUNCTION", "LOAD", "REPLACE", source)
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Pause stops the server (SIGSTOP): it keeps its connections and answers nothing
// until Resume. The test's end resumes it.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
	s.t.Cleanup(s.Resume)
}

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Kill ends the server with SIGKILL.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	}
}

// Restart kills the server and starts it again on the same port and directory,
// with nothing persisted: its locks and its library are gone (a module server
// loads the module again).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for try := 0; try < 50; try++ { // the port may take a moment to be free again
		if err = s.spawn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redis-server did not restart: %v\n%s", err, s.Log())
}

// Log is the server's log file.
func (s *Server) Log() string {
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(log)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// WaitUntil polls cond every 10 ms until it holds, failing the test after limit.
func WaitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReplicaOf makes s a replica of master and waits until the first sync is done.
func (s *Server) ReplicaOf(master *Server) {
	s.t.Helper()
	s.Do("REPLICAOF", "127.0.0.1", master.Port)
	WaitUntil(s.t, 20*time.Second, "the replica's link up", func() bool {
		info, _ := s.Query("INFO", "replication")
		text, _ := info.(string)
		return strings.Contains(text, "master_link_status:up")
	})
}
