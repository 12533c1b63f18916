package redislock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
)

// FreshOwner is a new owner id that says who holds: `host:pid:` and 16 random hex
// digits (`web-3:4121:9f0c2a…`), so LOCK.INFO and `redis-lock info` name the
// machine and the process, and still unique per acquire. The host name is cut at 64
// characters.
func FreshOwner() string {
	var random [8]byte
	// crypto/rand fails only where the system has no randomness source at all.
	_, _ = rand.Read(random[:])
	return ownerPrefix() + hex.EncodeToString(random[:])
}

// ownerPrefix is `host:pid:`, read once.
var ownerPrefix = sync.OnceValue(func() string {
	host, err := os.Hostname()
	host = strings.TrimSpace(host)
	if err != nil || host == "" {
		host = "host"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	return fmt.Sprintf("%s:%d:", host, os.Getpid())
})
