package redislock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// FreshOwner is a new owner id that says who holds: `host:pid:` and 16 random hex
// digits (`web-3:4121:9f0c2a…`), so LOCK.INFO and `redis-lock info` name the
// machine and the process, and still unique per acquire. The host name is cut at 64
// characters.
func FreshOwner() string {
	host, err := os.Hostname()
	host = strings.TrimSpace(host)
	if err != nil || host == "" {
		host = "host"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	var random [8]byte
	_, _ = rand.Read(random[:]) // crypto/rand.Read does not fail on Linux, and panics where it would
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(random[:]))
}
