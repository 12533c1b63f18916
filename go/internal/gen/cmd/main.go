// Command gen writes go/library.lua, go/protocol_gen.go and go/postgres_gen.go (see
// package gen); run by `go generate` in go/.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"redis-lock/go/redislock/internal/gen"
)

func main() {
	dir, err := os.Getwd()
	if err == nil {
		err = write(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := gen.Files(dir)
	if err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}
