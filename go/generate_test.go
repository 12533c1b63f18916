package redislock

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"redis-lock/go/redislock/internal/gen"
)

// The package's copies of lua/redislock.lua and of core's library versions are
// what `go generate` writes from the repository's sources now.
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
}
