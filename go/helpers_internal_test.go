package redislock

import (
	"os"
	"testing"
	"time"
)

var osGetpid = os.Getpid

func mustDuration(t *testing.T, text string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(text)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
