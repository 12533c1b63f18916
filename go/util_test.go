package redislock_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func containsAny(text string, words ...string) bool {
	for _, w := range words {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// replaceVersion is the library source answering lock_version with v.
func replaceVersion(t *testing.T, source string, v int64) string {
	t.Helper()
	const line = "\nlocal VERSION = "
	i := strings.Index(source, line)
	if i < 0 {
		t.Fatal("no VERSION line in the library")
	}
	end := strings.Index(source[i+1:], "\n")
	return source[:i] + fmt.Sprintf("%s%d", line, v) + source[i+1+end:]
}

var osStat = os.Stat
