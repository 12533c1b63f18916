package redislock

import (
	"testing"
	"time"
)

// at is t0 plus ms milliseconds.
func at(t0 time.Time, ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func wantDeadline(t *testing.T, r *leaseRule, t0 time.Time, ms int) {
	t.Helper()
	if got := r.deadline(); !got.Equal(at(t0, ms)) {
		t.Fatalf("deadline %v after t0, want %v", got.Sub(t0), time.Duration(ms)*time.Millisecond)
	}
}

func wantDue(t *testing.T, r *leaseRule, t0 time.Time, ms int) {
	t.Helper()
	if got := r.renewalDue(); !got.Equal(at(t0, ms)) {
		t.Fatalf("renewal due %v after t0, want %v", got.Sub(t0), time.Duration(ms)*time.Millisecond)
	}
}

// Renewals with the holding's own TTL change nothing of today's lease: send time of
// the last acknowledged one + TTL - margin, renewed at a third of the TTL; and the
// writes they leave behind are forgotten.
func TestTheRuleWithEqualTTLsIsTheLastAcknowledgedSendPlusTheTTL(t *testing.T) {
	t0 := time.Now()
	r := newLeaseRule(t0, 3*time.Second, at(t0, 2))
	wantDeadline(t, &r, t0, 2700)
	wantDue(t, &r, t0, 1000)
	for i := 1; i <= 50; i++ {
		sent := at(t0, 1000*i)
		w := r.start(sent, 3*time.Second)
		wantDeadline(t, &r, t0, 1000*(i-1)+2700) // in flight: the lease as it was
		r.acknowledge(w, sent.Add(3*time.Millisecond))
		wantDeadline(t, &r, t0, 1000*i+2700)
		wantDue(t, &r, t0, 1000*i+1000)
	}
	if len(r.open) != 0 {
		t.Errorf("%d writes kept", len(r.open))
	}
}

// A write with a shorter TTL on its way may be the last one applied: the lease
// counts its TTL from its send (it cannot be applied before), at once.
func TestAnInFlightShorterTTLShortensTheLeaseAtOnce(t *testing.T) {
	t0 := time.Now()
	r := newLeaseRule(t0, 30*time.Second, at(t0, 1))
	w := r.start(at(t0, 5000), 1200*time.Millisecond)
	wantDeadline(t, &r, t0, 5000+1080)
	wantDue(t, &r, t0, 5400)
	r.drop(w) // answered with an error: not applied
	wantDeadline(t, &r, t0, 27000)
}

// An extend to a shorter TTL: the lease and the renewals follow it from its send.
func TestAnExtendToAShorterTTLIsRenewedAtAThirdOfIt(t *testing.T) {
	t0 := time.Now()
	r := newLeaseRule(t0, 30*time.Second, at(t0, 1))
	w := r.start(at(t0, 10000), 1200*time.Millisecond)
	r.acknowledge(w, at(t0, 10002))
	wantDeadline(t, &r, t0, 10000+1080)
	wantDue(t, &r, t0, 10400)
}

// A write given up without a reply may still reach the server: its TTL bounds the
// lease for the life of the holding, from each later acknowledged send.
func TestAnAbandonedWriteBoundsTheLeaseForever(t *testing.T) {
	t0 := time.Now()
	r := newLeaseRule(t0, 30*time.Second, at(t0, 1))
	short := r.start(at(t0, 1000), 3*time.Second)
	r.abandon(short) // a timeout: its bytes may still arrive
	wantDeadline(t, &r, t0, 1000+2700)
	long := r.start(at(t0, 2000), 30*time.Second)
	r.acknowledge(long, at(t0, 2005))
	wantDeadline(t, &r, t0, 2000+2700)
	for _, sent := range []int{3000, 4000, 60000} {
		w := r.start(at(t0, sent), 30*time.Second)
		r.acknowledge(w, at(t0, sent+5))
		wantDeadline(t, &r, t0, sent+2700)
		wantDue(t, &r, t0, sent+1000)
	}
	// The same TTL abandoned changes nothing.
	r = newLeaseRule(t0, 3*time.Second, at(t0, 1))
	w := r.start(at(t0, 1000), 3*time.Second)
	r.abandon(w)
	wantDeadline(t, &r, t0, 2700)
	w = r.start(at(t0, 1100), 3*time.Second)
	r.acknowledge(w, at(t0, 1105))
	wantDeadline(t, &r, t0, 1100+2700)
}

// The reordered renewal: a renewal with the old TTL is on its way when the holder
// extends to a longer one on another connection; the server may apply the renewal
// last, so the lease keeps the renewal's TTL, counted from the extend's send, until
// a renewal with the new TTL is acknowledged.
func TestAnExtendToALongerTTLWithAShortRenewalInFlightKeepsTheShortTTL(t *testing.T) {
	for _, renewalFirst := range []bool{false, true} {
		t0 := time.Now()
		r := newLeaseRule(t0, 3*time.Second, at(t0, 1))
		renewal := r.start(at(t0, 1000), 3*time.Second)
		extend := r.start(at(t0, 1200), 30*time.Second)
		wantDeadline(t, &r, t0, 2700)
		if renewalFirst { // its reply came after the extend was sent: no order known
			r.acknowledge(renewal, at(t0, 1430))
			r.acknowledge(extend, at(t0, 1431))
		} else {
			r.acknowledge(extend, at(t0, 1430))
			wantDeadline(t, &r, t0, 1200+2700)
			r.acknowledge(renewal, at(t0, 1431))
		}
		wantDeadline(t, &r, t0, 1200+2700)
		wantDue(t, &r, t0, 1200+1000)
		next := r.start(at(t0, 2200), 30*time.Second)
		r.acknowledge(next, at(t0, 2203))
		wantDeadline(t, &r, t0, 2200+27000)
		if len(r.open) != 0 {
			t.Errorf("%d writes kept", len(r.open))
		}
	}
	// A renewal answered before the extend was sent was applied before it.
	t0 := time.Now()
	r := newLeaseRule(t0, 3*time.Second, at(t0, 1))
	renewal := r.start(at(t0, 1000), 3*time.Second)
	r.acknowledge(renewal, at(t0, 1002))
	extend := r.start(at(t0, 1200), 30*time.Second)
	r.acknowledge(extend, at(t0, 1203))
	wantDeadline(t, &r, t0, 1200+27000)
	wantDue(t, &r, t0, 1200+10000)
}

// A late reply to an older write does not move the lease past the newer one's.
func TestALateReplyToAnOlderWriteDoesNotMoveTheLease(t *testing.T) {
	t0 := time.Now()
	r := newLeaseRule(t0, 10*time.Second, at(t0, 1))
	old := r.start(at(t0, 1000), 10*time.Second)
	newer := r.start(at(t0, 3000), 10*time.Second)
	r.acknowledge(newer, at(t0, 3001))
	r.acknowledge(old, at(t0, 3500))
	wantDeadline(t, &r, t0, 3000+9000)
}
