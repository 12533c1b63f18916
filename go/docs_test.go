package redislock_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"redis-lock/go/redislock/internal/redistest"
)

// The Go examples of docs/go-client.md and of the README are the files under
// examples/, which `go vet ./...` compiles: they stay in step with the API.
func TestTheDocsShowTheExamplesThatCompile(t *testing.T) {
	for _, c := range []struct{ doc, example string }{
		{"docs/go-client.md", "examples/worker/main.go"},
		{"README.md", "examples/readme/main.go"},
	} {
		doc, err := os.ReadFile(filepath.Join(redistest.Root(), c.doc))
		if err != nil {
			t.Skipf("not inside the redis-lock repository: %v", err)
		}
		example, err := os.ReadFile(c.example)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), "```go\n"+string(example)+"```\n") {
			t.Errorf("%s does not show %s as it is: copy it into its ```go block", c.doc, c.example)
		}
	}
}
