package redislock

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"redis-lock/go/redislock/internal/gen"
)

// The package's copies of lua/redislock.lua, of core's library versions and of the
// PostgreSQL fence (fence/postgresql/*.sql) are what `go generate` writes from the
// repository's sources now.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(gen.Root(dir), "lua", "redislock.lua")); err != nil {
		t.Skip("not inside the redis-lock repository: nothing to compare with")
	}
	want, err := gen.Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Errorf("go/%s differs from what its source says: run `go generate` in go/", name)
		}
	}
	if LibrarySource != string(want[gen.LibraryFile]) {
		t.Error("the embedded library is not lua/redislock.lua: run `go generate` in go/")
	}
	for name, constant := range map[string]string{"table.sql": PostgresFenceTableSQL, "fence.sql": PostgresFenceSQL} {
		sql, err := os.ReadFile(filepath.Join(gen.Root(dir), "fence", "postgresql", name))
		if err != nil {
			t.Fatal(err)
		}
		if constant != string(sql) {
			t.Errorf("the fence's %s is not fence/postgresql/%s: run `go generate` in go/", name, name)
		}
	}
}

// The protocol constants are the project's (conformance/protocol.json, which
// core/src/protocol.rs writes), where the repository has that file.
func TestTheProtocolConstantsAreTheProjects(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(gen.Root(dir), "conformance", "protocol.json"))
	if err != nil {
		t.Skipf("no conformance/protocol.json to compare with: %v", err)
	}
	var want map[string]any
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{
		"renewal_divisor":           RenewalDivisor,
		"lease_margin_percent":      LeaseMarginPercent,
		"lease_margin_min_ms":       LeaseMarginMin.Milliseconds(),
		"wait_margin_ms":            WaitMargin.Milliseconds(),
		"withdraw_after_timeout_ms": WithdrawAfterTimeout.Milliseconds(),
		"release_limit_ms":          ReleaseLimit.Milliseconds(),
		"control_limit_ms":          ControlLimit.Milliseconds(),
		"library_version":           LibraryVersion,
		"min_library_version":       MinLibraryVersion,
	}
	for name, value := range want {
		number, ok := value.(float64)
		if !ok {
			continue // the file's comment
		}
		mine, known := got[name]
		if !known {
			t.Errorf("conformance/protocol.json has %s, which this client does not name", name)
		} else if mine != int64(number) {
			t.Errorf("%s: %d here, %v in conformance/protocol.json", name, mine, number)
		}
	}
}
