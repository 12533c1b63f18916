package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The election's record (docs/contract.md "Leaders"): a stream beside the election's key, in its
// hash slot, written only with the guard. One entry per change: <term>-0 when the
// term's leader takes office (field "value"), <term>-1 when it resigns. Ids grow with
// the terms, so an observer reading after the last id it saw gets every leader once,
// in term order, from a blocking XREAD.
const (
	recordSuffix  = ":leader"
	recordEntries = 16
	// MaxLeaderValue is the longest value a leader may publish, in bytes.
	MaxLeaderValue = 1024
	observeBlock   = time.Second
)

// Leader is the leader of an election: its term (the fencing token of its
// holding; terms only grow) and the value it published.
type Leader struct {
	Term  int64
	Value string
}

// Election is leader election at one key, with terms that fence. Make one with
// [Locker.Election].
type Election struct {
	locker *Locker
	key    string
	record string
	ttl    time.Duration
}

// Election is the election at key, whose leaders hold it for ttl between renewals.
// A key without a hash tag may not contain '}' (its record could not share its
// slot).
//
//	election, _ := locker.Election("{scheduler}", 10*time.Second)
//	leadership, err := election.Campaign(ctx, "10.0.0.7:8080") // waits in the queue
//	if err != nil {
//		return err
//	}
//	defer leadership.Resign(context.Background())
//	lead(leadership.Context()) // ends when leadership ends, before a rival leads
func (l *Locker) Election(key string, ttl time.Duration) (*Election, error) {
	record, err := recordKey(key)
	if err != nil {
		return nil, err
	}
	if _, err := newRequest(key, ttl, nil); err != nil {
		return nil, err
	}
	return &Election{locker: l, key: key, record: record, ttl: ttl}, nil
}

// Key is the election's key (its lock).
func (e *Election) Key() string { return e.key }

// RecordKey is the stream where leaders publish their values, in the key's slot.
func (e *Election) RecordKey() string { return e.record }

func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	closing := strings.IndexByte(key[open+1:], '}')
	if closing <= 0 {
		return "", false
	}
	return key[open+1 : open+1+closing], true
}

func recordKey(key string) (string, error) {
	if _, ok := hashTag(key); ok {
		return key + recordSuffix, nil
	}
	if strings.Contains(key, "}") {
		return "", fmt.Errorf("%w: invalid election key %q: without a hash tag it may not contain '}' "+
			"(give it a tag, e.g. {jobs}:leader-lock)", ErrInvalidArgument, key)
	}
	return "{" + key + "}" + recordSuffix, nil
}

// entryOf reads an entry id: ("leader", term), ("resigned", term) or ("", 0).
func entryOf(id string) (string, int64) {
	termText, seq, ok := strings.Cut(id, "-")
	term, err := strconv.ParseInt(termText, 10, 64)
	if !ok || err != nil || term <= 0 {
		return "", 0
	}
	switch seq {
	case "0":
		return "leader", term
	case "1":
		return "resigned", term
	}
	return "", 0
}

// Leadership is this candidate's leadership: renewed in the background until
// [Leadership.Resign]; its [Leadership.Context] ends when it no longer leads,
// before any other candidate can.
type Leadership struct {
	election  *Election
	lock      *Lock
	value     string
	published bool
}

// Term is the leadership's term: the fencing token of its holding.
func (ld *Leadership) Term() int64 { return ld.lock.token }

// Value is the value this leader published.
func (ld *Leadership) Value() string { return ld.value }

// Lock is the lock held while leading.
func (ld *Leadership) Lock() *Lock { return ld.lock }

// Context ends when this candidate no longer leads (a renewal found the lock gone,
// a guarded write was fenced, the lease ran out, or it resigned), before any rival
// can lead; its Err reads the lease's clock, as [Lock.Context]'s does.
func (ld *Leadership) Context() context.Context { return ld.lock.Context() }

// Campaign waits in the server's FIFO queue, without polling, until this candidate
// leads (or ctx ends), then publishes value (at most [MaxLeaderValue] bytes) with a
// guarded write and renews the leadership in the background.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if len(value) > MaxLeaderValue {
		return nil, fmt.Errorf("%w: invalid value: %d bytes, at most %d", ErrInvalidArgument,
			len(value), MaxLeaderValue)
	}
	for {
		lock, err := e.locker.Acquire(ctx, e.key, e.ttl)
		if err != nil {
			return nil, err
		}
		ld := &Leadership{election: e, lock: lock, value: value}
		err = ld.recordWrite(ctx, publishArgs(e.record, ld.Term(), value))
		if err == nil {
			ld.published = true
			return ld, nil
		}
		_ = ld.Resign(context.WithoutCancel(ctx))
		if !errors.Is(err, ErrFenced) && !errors.Is(err, ErrLockLost) {
			return nil, err
		}
		// Lost before it could publish (paused past its lease): campaign again.
	}
}

func publishArgs(record string, term int64, value string) []any {
	return []any{"XADD", record, "MAXLEN", "=", recordEntries, fmt.Sprintf("%d-0", term), "value", value}
}

func resignArgs(record string, term int64) []any {
	return []any{"XADD", record, "MAXLEN", "=", recordEntries, fmt.Sprintf("%d-1", term), "resigned", 1}
}

// recordWrite is a guarded XADD; an id already there (a reply lost, the write sent
// again) is the write done.
func (ld *Leadership) recordWrite(ctx context.Context, args []any) error {
	err := ld.lock.Guard(ctx, []string{ld.election.record}, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "equal or smaller than the target stream top") {
		return err
	}
	top, topErr := ld.election.top(ctx)
	if topErr == nil && top != nil && top.id == args[5] {
		return nil
	}
	return err
}

// Resign marks the record, stops renewing and releases the lock: the next
// candidate in the queue leads at once. ErrNotHeld (errors.Is) if leadership was
// lost already.
func (ld *Leadership) Resign(ctx context.Context) error {
	if ld.published && ld.lock.Context().Err() == nil {
		err := ld.recordWrite(ctx, resignArgs(ld.election.record, ld.Term()))
		if err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrLockLost) {
			_ = ld.lock.Release(ctx)
			return err
		}
	}
	ld.published = false
	err := ld.lock.Release(ctx)
	if errors.Is(err, ErrReleased) {
		return nil
	}
	return err
}

// Guard is [Lock.Guard] with the term: refused ([ErrFenced]) once another
// candidate leads, and nothing is written.
func (ld *Leadership) Guard(ctx context.Context, keys []string, command ...any) error {
	return ld.lock.Guard(ctx, keys, command...).Err()
}

type streamEntry struct {
	id     string
	fields map[string]string
}

// raw sends args on a connection of the locker's own to the record's server.
func (e *Election) raw(ctx context.Context, limit time.Duration, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	d, err := e.locker.conns.get(ctx, e.record)
	if err != nil {
		return nil, err
	}
	reply, err := d.do(ctx, args...)
	e.locker.conns.done(d, err)
	return reply, err
}

func (e *Election) top(ctx context.Context) (*streamEntry, error) {
	reply, err := e.raw(ctx, ControlLimit, "XREVRANGE", e.record, "+", "-", "COUNT", 1)
	if err != nil {
		return nil, err
	}
	entries, err := parseEntries(reply)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	return &entries[0], nil
}

// Leader is the current leader, or nil while nobody leads (the key is free, its
// holder has not published yet, or resigned).
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	// The lock, then the record: a record newer than the lock read means a new
	// leader came in between; read both again.
	for range 3 {
		info, err := e.locker.Info(ctx, e.key)
		if err != nil {
			return nil, err
		}
		var term int64
		if info != nil && info.Mode == "exclusive" && len(info.Holders) > 0 {
			term = info.Holders[0].Token
		}
		last, err := e.top(ctx)
		if err != nil || last == nil {
			return nil, err
		}
		kind, published := entryOf(last.id)
		switch {
		case kind == "leader" && published == term && term > 0:
			return &Leader{Term: term, Value: last.fields["value"]}, nil
		case kind != "" && published > term:
			continue
		}
		return nil, nil
	}
	return nil, nil
}

// Observe sends every change of leader from now on, in term order, each once: the
// current leader first, if there is one. It positions itself before it returns
// (when the server answers within [ControlLimit]: a leader that takes office after
// Observe returned is sent). It reads the record with a blocking XREAD (one call a
// second at most while nothing changes), never by polling the lock; a failed read
// is tried again a second later, from where it was, so none is missed. The channel
// is closed when ctx ends.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	o := &observer{election: e}
	o.position(ctx)
	go func() {
		defer close(out)
		send := func(leader Leader) bool {
			select {
			case out <- leader:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for ctx.Err() == nil {
			if !o.started && !o.position(ctx) {
				sleep(ctx, observeBlock)
				continue
			}
			for len(o.pending) > 0 {
				leader := o.pending[0]
				o.pending = o.pending[1:]
				if !send(leader) {
					return
				}
			}
			if err := o.read(ctx); err != nil && ctx.Err() == nil {
				e.locker.log.Warn("observing the election failed", "key", e.key, "err", err)
				sleep(ctx, observeBlock)
			}
		}
	}()
	return out
}

// observer is where an Observe reads on from.
type observer struct {
	election *Election
	started  bool
	after    string
	lastTerm int64
	pending  []Leader
}

// position reads the record's top (the cursor), then the current leader: a leader
// whose entry is at or before the cursor is sent first; one that took office in
// between is after the cursor, and the first read sends it. False if it failed.
func (o *observer) position(ctx context.Context) bool {
	e := o.election
	last, err := e.top(ctx)
	var current *Leader
	if err == nil {
		current, err = e.Leader(ctx)
	}
	if err != nil {
		e.locker.log.Warn("observing the election failed", "key", e.key, "err", err)
		return false
	}
	o.started = true
	o.after = "0-0"
	if last != nil {
		o.after = last.id
	}
	cursorTerm, _ := strconv.ParseInt(strings.SplitN(o.after, "-", 2)[0], 10, 64)
	if current != nil && current.Term <= cursorTerm {
		o.lastTerm = current.Term
		o.pending = append(o.pending, *current)
	}
	return true
}

// read is one blocking read after the cursor; the leaders it finds are pending.
func (o *observer) read(ctx context.Context) error {
	e := o.election
	reply, err := e.raw(ctx, observeBlock+ControlLimit, "XREAD", "COUNT", recordEntries,
		"BLOCK", observeBlock.Milliseconds(), "STREAMS", e.record, o.after)
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	entries, err := parseStreams(reply)
	if err != nil {
		return err
	}
	if reply != nil && len(entries) == 0 {
		// Read again at once it would be, without end.
		return fmt.Errorf("redislock: an XREAD reply not understood: %T", reply)
	}
	for _, entry := range entries {
		o.after = entry.id
		if kind, term := entryOf(entry.id); kind == "leader" && term > o.lastTerm {
			o.lastTerm = term
			o.pending = append(o.pending, Leader{Term: term, Value: entry.fields["value"]})
		}
	}
	return nil
}

// RunWhileLeader campaigns with value and runs work while leading: work's context
// ends when leadership is lost (before any rival can lead) or ctx ends, as
// client-go's OnStartedLeading. When work returns while still leading, it resigns
// and returns work's error. After a loss, it campaigns again if again, else returns
// the loss (errors.Is(err, ErrLockLost)).
func (e *Election) RunWhileLeader(ctx context.Context, value string, again bool,
	work func(ctx context.Context, ld *Leadership) error) error {
	for {
		ld, err := e.Campaign(ctx, value)
		if err != nil {
			return err
		}
		inner, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(ld.Context(), func() { cancel(context.Cause(ld.Context())) })
		workErr := work(&workContext{Context: inner, lock: ld.Context(), cancel: cancel}, ld)
		stop()
		cancel(nil)
		lost := ld.Context().Err() != nil
		cause := context.Cause(ld.Context())
		resignCtx, done := context.WithTimeout(context.WithoutCancel(ctx), ReleaseLimit)
		resigned := ld.Resign(resignCtx)
		done()
		if !lost {
			if workErr == nil && resigned != nil && !errors.Is(resigned, ErrNotHeld) {
				e.locker.log.Warn("resign failed: the leadership lapses with its TTL", "key", e.key, "err", resigned)
			}
			return workErr
		}
		if !again || ctx.Err() != nil {
			return fmt.Errorf("redislock: leadership of %q lost: %w", e.key, cause)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// parseEntries reads an XRANGE/XREVRANGE reply.
func parseEntries(reply any) ([]streamEntry, error) {
	if reply == nil {
		return nil, nil
	}
	items, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redislock: unexpected stream reply %T", reply)
	}
	entries := make([]streamEntry, 0, len(items))
	for _, item := range items {
		parts, ok := item.([]any)
		if !ok || len(parts) != 2 {
			return nil, fmt.Errorf("redislock: unexpected stream entry %v", item)
		}
		id, _ := parts[0].(string)
		fields := map[string]string{}
		switch raw := parts[1].(type) {
		case []any:
			for i := 0; i+1 < len(raw); i += 2 {
				name, _ := raw[i].(string)
				value, _ := raw[i+1].(string)
				fields[name] = value
			}
		case map[any]any:
			for name, value := range raw {
				n, _ := name.(string)
				v, _ := value.(string)
				fields[n] = v
			}
		}
		entries = append(entries, streamEntry{id: id, fields: fields})
	}
	return entries, nil
}

// parseStreams reads an XREAD reply of one stream (RESP2 array or RESP3 map).
func parseStreams(reply any) ([]streamEntry, error) {
	switch streams := reply.(type) {
	case nil:
		return nil, nil
	case map[any]any:
		var all []streamEntry
		for _, entries := range streams {
			read, err := parseEntries(entries)
			if err != nil {
				return nil, err
			}
			all = append(all, read...)
		}
		return all, nil
	case []any:
		var all []streamEntry
		for _, stream := range streams {
			parts, ok := stream.([]any)
			if !ok || len(parts) != 2 {
				return nil, fmt.Errorf("redislock: unexpected XREAD reply %v", stream)
			}
			read, err := parseEntries(parts[1])
			if err != nil {
				return nil, err
			}
			all = append(all, read...)
		}
		return all, nil
	}
	return nil, fmt.Errorf("redislock: unexpected XREAD reply %T", reply)
}
