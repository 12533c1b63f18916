package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Sentinel is a redis-sentinel that monitors one master as "mymaster".
type Sentinel struct {
	*Server
}

// StartSentinel starts a redis-sentinel (REDIS_SENTINEL, or redis-sentinel)
// monitoring master, stopped when the test ends.
func StartSentinel(t testing.TB, master *Server) *Sentinel {
	t.Helper()
	binary := os.Getenv("REDIS_SENTINEL")
	if binary == "" {
		binary = "redis-sentinel"
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds mymaster 5000\n", master.Port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, Kind: Plain, Binary: binary, dir: dir}
	var err error
	for try := 0; try < 20; try++ {
		s.Port = freePort(t)
		s.args = []string{conf, "--port", fmt.Sprint(s.Port), "--bind", "127.0.0.1", "--dir", dir,
			"--logfile", "redis.log"}
		if err = s.spawn(); err == nil {
			t.Cleanup(s.Kill)
			return &Sentinel{s}
		}
	}
	t.Fatalf("redis-sentinel did not start: %v\n%s", err, s.Log())
	return nil
}
