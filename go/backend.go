package redislock

import (
	"crypto/sha1"
	_ "embed" // the library's source
	"encoding/hex"
	"fmt"
	"strings"
)

//go:generate go run ./internal/gen/cmd

// LibrarySource is the redislock function library as FUNCTION LOAD takes it: a copy
// of the repository's lua/redislock.lua, made by `go generate` (a test fails while
// the two differ).
//
//go:embed library.lua
var LibrarySource string

// Backend is the form of the lock a server offers, and a [Locker] uses.
type Backend int

const (
	// Auto (the zero value) finds the backend out: the module if the server has
	// it, else the function library if it is loaded, else the library as a script.
	Auto Backend = iota
	// Module is the redis-lock module: LOCK.ACQUIRE, … with waiting done in the
	// server.
	Module
	// Functions is the redislock library loaded with FUNCTION LOAD: FCALL
	// lock_acquire, … and the waiting protocol of docs/PROTOCOL.md.
	Functions
	// Scripts is the same library sent by this client with SCRIPT LOAD and called
	// with EVALSHA (Redis 6.2, or an ACL without FUNCTION); loaded again on NOSCRIPT.
	Scripts
)

// String is the backend's name: auto, module, functions or scripts.
func (b Backend) String() string {
	switch b {
	case Auto:
		return "auto"
	case Module:
		return "module"
	case Functions:
		return "functions"
	case Scripts:
		return "scripts"
	}
	return fmt.Sprintf("Backend(%d)", int(b))
}

// ParseBackend is the backend of a name String gives.
func ParseBackend(name string) (Backend, error) {
	for _, b := range []Backend{Auto, Module, Functions, Scripts} {
		if b.String() == name {
			return b, nil
		}
	}
	return Auto, fmt.Errorf("redislock: backend %q: expected auto, module, functions or scripts", name)
}

// library reports whether waits on b are the library's protocol (lock_wait and
// BLPOP) rather than one blocking command.
func (b Backend) library() bool { return b == Functions || b == Scripts }

// libraryScript is the library as SCRIPT LOAD takes it: without its `#!lua` line,
// which Lua 5.1 cannot parse (docs/PROTOCOL.md, "Loading").
var libraryScript = func() string {
	first, rest, found := strings.Cut(LibrarySource, "\n")
	if found && strings.HasPrefix(first, "#!") {
		return rest
	}
	return LibrarySource
}()

// scriptSHA is the SHA1 EVALSHA calls libraryScript by.
var scriptSHA = func() string {
	sum := sha1.Sum([]byte(libraryScript))
	return hex.EncodeToString(sum[:])
}()

// moduleCommands names the module's command for each library call it has.
var moduleCommands = map[string]string{
	"lock_acquire": "LOCK.ACQUIRE",
	"lock_release": "LOCK.RELEASE",
	"lock_extend":  "LOCK.EXTEND",
	"lock_info":    "LOCK.INFO",
}

// call is one library call (lock_acquire, …) on a key, as the words a backend
// sends, and the position of its key among them (0: none).
type call struct {
	args   []any
	keyPos int
}

// command turns library call function on key ("" for lock_version, which takes
// none) with args into what b sends. The arguments after the key are the same on
// every backend.
func (b Backend) command(function, key string, args ...any) call {
	keys := 0
	if key != "" {
		keys = 1
	}
	var words []any
	keyPos := 0
	switch b {
	case Module:
		words = append(words, moduleCommands[function], key)
		keyPos = 1
	case Scripts:
		words = append(words, "EVALSHA", scriptSHA, keys)
		if keys == 1 {
			words = append(words, key)
			keyPos = 3
		}
		words = append(words, function)
	default:
		name := "FCALL"
		if function == "lock_info" || function == "lock_version" {
			name = "FCALL_RO"
		}
		words = append(words, name, function, keys)
		if keys == 1 {
			words = append(words, key)
			keyPos = 3
		}
	}
	return call{args: append(words, args...), keyPos: keyPos}
}

// call is what b sends for library call function on key with args: the probe's
// arguments as they are, else b.command's words.
func (b Backend) call(function, key string, args ...any) call {
	if function == probe {
		return call{args: args}
	}
	return b.command(function, key, args...)
}

// guard is what b sends for a guarded command: LOCK.GUARD key token command … on the
// module (which finds the command's keys itself), else lock_guard with the lock key
// and dataKeys declared, as FCALL or EVALSHA take them.
func (b Backend) guard(key string, dataKeys []string, token int64, command []any) call {
	if b == Module {
		words := append([]any{"LOCK.GUARD", key, token}, command...)
		return call{args: words, keyPos: 1}
	}
	words := make([]any, 0, 6+len(dataKeys)+len(command))
	if b == Scripts {
		words = append(words, "EVALSHA", scriptSHA)
	} else {
		words = append(words, "FCALL", "lock_guard")
	}
	words = append(words, 1+len(dataKeys), key)
	for _, k := range dataKeys {
		words = append(words, k)
	}
	if b == Scripts {
		words = append(words, "lock_guard") // the script's first argument names the call
	}
	words = append(words, token)
	return call{args: append(words, command...), keyPos: 3}
}

// kindArgs are the words of a holding's kind: none (exclusive), SHARED, or LIMIT n.
func kindArgs(shared bool, limit int64) []any {
	switch {
	case limit > 0:
		return []any{"LIMIT", limit}
	case shared:
		return []any{"SHARED"}
	}
	return nil
}
