package redislock

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A guarded command is the same words after the token on every backend; the
// library is told the data keys, the module finds them itself.
func TestEachBackendGuardsTheSameCommand(t *testing.T) {
	command := []any{"SET", "{j}:out", "v"}
	for _, c := range []struct {
		c    call
		want string
	}{
		{Module.guard("{j}", []string{"{j}:out"}, 17, command), "LOCK.GUARD {j} 17 SET {j}:out v"},
		{Functions.guard("{j}", []string{"{j}:out"}, 17, command), "FCALL lock_guard 2 {j} {j}:out 17 SET {j}:out v"},
		{Functions.guard("{j}", nil, 17, []any{"PING"}), "FCALL lock_guard 1 {j} 17 PING"},
		{Scripts.guard("{j}", []string{"{j}:a", "{j}:b"}, 17, command),
			"EVALSHA " + scriptSHA + " 3 {j} {j}:a {j}:b lock_guard 17 SET {j}:out v"},
	} {
		if got := words(c.c); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// replyError is an error reply of the server, as go-redis gives one (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// The fenced error and the loss it causes say what happened and what to do, and
// match the way Go matches errors.
func TestTheFencedErrorSaysWhy(t *testing.T) {
	reply := replyError("FENCED token 17 does not hold jobs:1: it is held with token 19")
	redisSide := &FencedError{Key: "jobs:1", Token: 17, Err: reply}
	lost := &LostError{Key: "jobs:1", Reason: Fenced, Err: redisSide}
	for _, err := range []error{redisSide, lost} {
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "held with token 19") {
			t.Errorf("%v: not ErrFenced, or without the server's reason", err)
		}
	}
	if !errors.Is(lost, ErrLockLost) || !strings.Contains(lost.Error(), "fenced") {
		t.Errorf("%v", lost)
	}
	postgres := &FencedError{Key: "report", Token: 17}
	if !errors.Is(postgres, ErrFenced) || !strings.Contains(postgres.Error(), "greater token") ||
		!strings.Contains(postgres.Error(), "roll back") {
		t.Errorf("%v", postgres)
	}
	tooOld := &LibraryVersionError{Found: 3, Min: 2, Max: 3, Lacks: "lock_guard"}
	if !strings.Contains(tooOld.Error(), "has no lock_guard") || !strings.Contains(tooOld.Error(), "functions load") {
		t.Errorf("%v", tooOld)
	}
	if !lacksGuard(replyError("ERR unknown function 'lock_guard': expected lock_acquire, …")) {
		t.Error("the scripts path's answer for a call it lacks is not seen")
	}
}

// A CROSSSLOT reply names a data key in the lock key's slot.
func TestTheHashTagToUse(t *testing.T) {
	for key, want := range map[string]string{
		"jobs:1":        "{jobs:1}:out",
		"{jobs:1}":      "{jobs:1}:out",
		"{jobs}:1:lock": "{jobs}:out",
		"a}b":           "{job:1}:out beside a lock {job:1}",
		"{}x":           "{job:1}:out beside a lock {job:1}",
	} {
		if got := sameSlotExample(key); got != want {
			t.Errorf("%q: %q, want %q", key, got, want)
		}
	}
}
