package redislock

import (
	"context"
	"fmt"
)

// detect finds the server's backend (the forced one, checked): the module when
// COMMAND INFO LOCK.ACQUIRE names it; else the library when FCALL_RO lock_version 0
// answers (no FUNCTION LIST needed, which restrictive ACLs refuse); else the library
// as a script, when EVALSHA (after a SCRIPT LOAD) answers lock_version. A library
// version this client does not speak is an error naming it and the range; a server
// with none of them, one line saying what to do.
func (l *Locker) detect(ctx context.Context) (Backend, error) {
	candidates := []Backend{Module, Functions, Scripts}
	if l.forced != Auto {
		candidates = []Backend{l.forced}
	}
	var why []string
	for _, b := range candidates {
		if b == Module {
			reply, err := l.send(ctx, ControlLimit, Module, probe, "", "COMMAND", "INFO", "LOCK.ACQUIRE")
			switch {
			case err == nil && namesACommand(reply):
				return Module, nil
			case err == nil:
				why = append(why, "no module (no LOCK.ACQUIRE command)")
			case !serverError(err):
				return Auto, err // the next probe would fail alike
			default:
				why = append(why, "COMMAND INFO refused: "+err.Error())
			}
			continue
		}
		reply, err := l.send(ctx, ControlLimit, b, "lock_version", "")
		if err != nil {
			if !serverError(err) {
				return Auto, err
			}
			if b == Functions {
				why = append(why, "no redislock library: "+err.Error())
			} else {
				why = append(why, "scripts refused: "+err.Error())
			}
			continue
		}
		version, ok := reply.(int64)
		if !ok {
			return Auto, fmt.Errorf("redislock: lock_version answered %v, not a number", reply)
		}
		if err := CheckLibraryVersion(version); err != nil {
			return Auto, err
		}
		return b, nil
	}
	return Auto, &NoBackendError{Why: why}
}

// namesACommand reports whether a COMMAND INFO reply describes a command (an
// unknown one is a nil entry).
func namesACommand(reply any) bool {
	switch entries := reply.(type) {
	case []any:
		for _, entry := range entries {
			if entry != nil {
				return true
			}
		}
	case map[any]any:
		return len(entries) > 0
	}
	return false
}
