package redislock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func words(c call) string {
	var out []string
	for _, arg := range c.args {
		out = append(out, fmt.Sprint(arg))
	}
	return strings.Join(out, " ")
}

func TestEachBackendCarriesTheSameArguments(t *testing.T) {
	cases := []struct {
		c      call
		want   string
		keyPos int
	}{
		{Module.command("lock_extend", "job", "me", int64(500)), "LOCK.EXTEND job me 500", 1},
		{Functions.command("lock_extend", "job", "me", int64(500)), "FCALL lock_extend 1 job me 500", 3},
		{Functions.command("lock_info", "job"), "FCALL_RO lock_info 1 job", 3},
		{Functions.command("lock_version", ""), "FCALL_RO lock_version 0", 0},
		{Scripts.command("lock_info", "job"), "EVALSHA " + scriptSHA + " 1 job lock_info", 3},
		{Scripts.command("lock_version", ""), "EVALSHA " + scriptSHA + " 0 lock_version", 0},
	}
	for _, c := range cases {
		if got := words(c.c); got != c.want || c.c.keyPos != c.keyPos {
			t.Errorf("got %q (key at %d), want %q (key at %d)", got, c.c.keyPos, c.want, c.keyPos)
		}
	}
	if len(scriptSHA) != 40 {
		t.Errorf("sha %q", scriptSHA)
	}
}

func TestTheScriptIsTheLibraryWithoutItsFirstLine(t *testing.T) {
	if !strings.HasPrefix(LibrarySource, "#!lua name=redislock\n") {
		t.Fatalf("library starts %q", LibrarySource[:30])
	}
	if strings.HasPrefix(libraryScript, "#!") || !strings.HasSuffix(LibrarySource, libraryScript) {
		t.Error("the script keeps the #! line, or is not the rest of the library")
	}
}

func TestALibraryVersionOutsideTheRangeIsRefusedNamingItAndTheRange(t *testing.T) {
	for v := int64(MinLibraryVersion); v <= LibraryVersion; v++ {
		if err := CheckLibraryVersion(v); err != nil {
			t.Errorf("version %d: %v", v, err)
		}
	}
	wanted := map[int64]string{MinLibraryVersion - 1: "older", LibraryVersion + 1: "newer"}
	for v, word := range wanted {
		err := CheckLibraryVersion(v)
		var version *LibraryVersionError
		if !errors.As(err, &version) || version.Found != v {
			t.Fatalf("version %d: %v", v, err)
		}
		text := err.Error()
		for _, want := range []string{fmt.Sprintf("version %d, %s", v, word), accepted(MinLibraryVersion, LibraryVersion)} {
			if !strings.Contains(text, want) {
				t.Errorf("%q lacks %q", text, want)
			}
		}
	}
	if accepted(2, 2) != "version 2" || accepted(2, 3) != "versions 2 to 3" {
		t.Error(accepted(2, 3))
	}
}

func TestArgumentsTheServerWouldRefuseAreRefusedBeforeSending(t *testing.T) {
	bad := []struct {
		ttl  string
		opts []AcquireOption
	}{
		{"0s", nil},
		{"-1s", nil},
		{"1s", []AcquireOption{Limit(0)}},
		{"1s", []AcquireOption{Limit(MaxPermits + 1)}},
		{"1s", []AcquireOption{WithOwner("")}},
		{"1s", []AcquireOption{WithOwner(strings.Repeat("x", 257))}},
		{"1s", []AcquireOption{WaitFor(-1)}},
	}
	for _, c := range bad {
		ttl := mustDuration(t, c.ttl)
		if _, err := newRequest("job", ttl, c.opts); err == nil {
			t.Errorf("ttl %s, %d options: accepted", c.ttl, len(c.opts))
		}
	}
	r, err := newRequest("job", 300*1000, []AcquireOption{Limit(MaxPermits)}) // 0.3 ms
	if err != nil || r.ttlMs != 1 || r.limit != MaxPermits {
		t.Errorf("%+v %v: a TTL under a millisecond rounds up, never to 0", r, err)
	}
}

func TestFreshOwnersSayHostAndProcessAndAreDistinct(t *testing.T) {
	a, b := FreshOwner(), FreshOwner()
	if a == b {
		t.Fatal("two fresh owners are equal")
	}
	parts := strings.Split(a, ":")
	if len(parts) != 3 || parts[0] == "" || len(parts[0]) > 64 || len(parts[2]) != 16 {
		t.Fatalf("%q is not host:pid:16 hex digits", a)
	}
	if parts[1] != fmt.Sprint(osGetpid()) {
		t.Errorf("%q does not name this process", a)
	}
}
