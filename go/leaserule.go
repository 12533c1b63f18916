package redislock

import "time"

// The lease rule: how long the holder may trust a holding, from the writes that set
// its expiry in the server (the acquire, each renewal, each extend), with the
// current time an argument so that it is tested without a server or a clock.
//
// The server's expiry is set by the write it applied last, which need not be the
// one sent last: a renewal on the renewal's connection and an extend on another
// can reach the server in either order, and so can a write abandoned after a
// timeout (its bytes may still arrive). Let V be the acknowledged write with the
// latest send time s_V. Any other write W not known to have been applied before V
// may have been applied after it, so after both sends: the expiry is then at
// least max(s_V, s_W) + T_W. W is known to have been applied before V when W's
// reply arrived before V was sent. So the lease is the earliest of these windows,
// V's own (s_V, T_V) and one per such W, each ending its margin before its end:
//
//	deadline = min over windows (start + T − Margin(T))
//
// and the next renewal is due a third of the way into the earliest window. Writes
// with the TTL of V change nothing (their windows start no earlier and last as
// long), so steady renewals keep the lease of V alone; only a write with a shorter
// TTL (an extend to a shorter TTL, a renewal with the old one reordered after an
// extend to a longer one) can shorten it. A write never answered stays a window for
// the life of the holding: it may still arrive.
//
// This is contract.md "Renewal and the lease": a W sent after V is applied after
// its own send, so its window starts at s_W, not s_V (an extend to a shorter TTL,
// sent long after the last renewal, does not end the lease at once).

// write is one write that sets the holding's expiry: when it was sent, with which
// TTL, and what became of it.
type write struct {
	sent      time.Time
	ttl       time.Duration
	answered  time.Time // when its acknowledgement arrived; zero: not (yet)
	abandoned bool      // given up without a reply: it may still reach the server
}

// leaseRule is the writes of one holding that bound its lease.
type leaseRule struct {
	latest *write   // V: the acknowledged write with the latest send time
	open   []*write // the writes not known to have been applied before latest
	// The shortest TTL of the abandoned writes sent before latest (0: none): each
	// has the window (latest.sent, TTL), so one is enough.
	abandonedTTL time.Duration
}

// newLeaseRule is the rule of a holding granted by a write sent at sent with ttl,
// acknowledged at answered.
func newLeaseRule(sent time.Time, ttl time.Duration, answered time.Time) leaseRule {
	return leaseRule{latest: &write{sent: sent, ttl: ttl, answered: answered}}
}

// start records a write of ttl sent at now, not answered yet.
func (r *leaseRule) start(now time.Time, ttl time.Duration) *write {
	w := &write{sent: now, ttl: ttl}
	r.open = append(r.open, w)
	return w
}

// acknowledge records that w was answered (applied: the server held the lock) at
// now.
func (r *leaseRule) acknowledge(w *write, now time.Time) {
	w.answered = now
	if w.sent.After(r.latest.sent) {
		r.remove(w)
		r.open = append(r.open, r.latest)
		r.latest = w
	}
	r.prune()
}

// abandon records that w got no reply and will get none: it may still be applied.
func (r *leaseRule) abandon(w *write) {
	w.abandoned = true
	r.prune()
}

// drop records that w was answered with an error: it was not applied.
func (r *leaseRule) drop(w *write) {
	r.remove(w)
}

func (r *leaseRule) remove(w *write) {
	for i, o := range r.open {
		if o == w {
			r.open = append(r.open[:i], r.open[i+1:]...)
			return
		}
	}
}

// prune forgets the writes known to have been applied before latest (answered
// before it was sent), and folds the abandoned ones sent before it into
// abandonedTTL, so that the open writes stay few.
func (r *leaseRule) prune() {
	kept := r.open[:0]
	for _, w := range r.open {
		switch {
		case !w.answered.IsZero() && w.answered.Before(r.latest.sent):
		case w.abandoned && !w.sent.After(r.latest.sent):
			if r.abandonedTTL == 0 || w.ttl < r.abandonedTTL {
				r.abandonedTTL = w.ttl
			}
		default:
			kept = append(kept, w)
		}
	}
	clear(r.open[len(kept):])
	r.open = kept
}

// windows calls each with the start and TTL of every window that bounds the
// lease.
func (r *leaseRule) windows(each func(start time.Time, ttl time.Duration)) {
	each(r.latest.sent, r.latest.ttl)
	if r.abandonedTTL > 0 {
		each(r.latest.sent, r.abandonedTTL)
	}
	for _, w := range r.open {
		start := r.latest.sent
		if w.sent.After(start) {
			start = w.sent
		}
		each(start, w.ttl)
	}
}

// deadline is when the lease ends: the earliest window's end, less its margin.
func (r *leaseRule) deadline() time.Time {
	var earliest time.Time
	r.windows(func(start time.Time, ttl time.Duration) {
		if end := start.Add(ttl - Margin(ttl)); earliest.IsZero() || end.Before(earliest) {
			earliest = end
		}
	})
	return earliest
}

// renewalDue is when the next renewal is due: a third of the way into the window
// that comes due first.
func (r *leaseRule) renewalDue() time.Time {
	var earliest time.Time
	r.windows(func(start time.Time, ttl time.Duration) {
		if due := start.Add(period(ttl)); earliest.IsZero() || due.Before(earliest) {
			earliest = due
		}
	})
	return earliest
}
