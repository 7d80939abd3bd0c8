package scheduler

import (
	"math"
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// keyService returns key's normalized service in class k, and whether the
// class tracks it.
func (f *fixture) keyService(k int, key string) (float64, bool) { return f.s.Class(k).Service(key) }

// TestCancelQueuedChargesNothing: a queued request cancelled leaves the queue
// (and the deadline heap); its key's service and its class's deficit are
// unchanged; the next request is dispatched as if it had never been there.
func TestCancelQueuedChargesNothing(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000) // busy: premium queues
	a := f.arrive("premium", 600, func(a *request.Arrival) { a.Key = "acme"; a.HasDeadline, a.DeadlineMs = true, 60000 })
	b := f.arrive("premium", 600, func(a *request.Arrival) { a.Key = "acme" })
	f.wantKind(a, Queued)
	svc, _ := f.keyService(0, "acme")
	deficit := f.s.arb.Deficit(0)
	if !f.s.Cancel(a.Req) {
		t.Fatal("Cancel of a queued request = false")
	}
	if f.s.Cancel(a.Req) {
		t.Error("a second Cancel = true, want false (no longer queued)")
	}
	if got := f.s.Queued(0); got != 1 {
		t.Errorf("queued = %d, want 1", got)
	}
	if f.s.NextDeadline() != 0 {
		t.Errorf("the deadline heap still holds the cancelled request")
	}
	if got, _ := f.keyService(0, "acme"); got != svc || f.s.arb.Deficit(0) != deficit {
		t.Errorf("service %v deficit %d, want %v and %d unchanged", got, f.s.arb.Deficit(0), svc, deficit)
	}
	f.report("w1", 0)
	if d := f.s.Next(f.now); d.Kind != Dispatch || d.Req != b.Req {
		t.Fatalf("Next = %d %v, want b dispatched", d.Kind, d.Req)
	}
	if f.s.Cancel(b.Req) {
		t.Error("Cancel of a dispatched request = true, want false")
	}
}

// TestCancelRefundsARefusedRequest: a request charged at arbitration and
// handed back by a refusal is refunded when cancelled: its key's service and
// its class's deficit are what they were before it was served, and the key
// owes nothing (it is forgotten once idle).
func TestCancelRefundsARefusedRequest(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	a := f.arrive("premium", 600, func(a *request.Arrival) { a.Key = "acme" })
	f.wantKind(a, Queued)
	before, _ := f.keyService(0, "acme")
	f.report("w1", 0)
	d := f.s.Next(f.now)
	if d.Kind != Dispatch || d.Req != a.Req {
		t.Fatalf("Next = %d, want a dispatched", d.Kind)
	}
	deficitAfter := f.s.arb.Deficit(0)
	f.s.Return(f.now, d.Req, d.Worker, d.Seq)
	if got, _ := f.keyService(0, "acme"); got <= before {
		t.Fatalf("service after the charge %v, want above %v", got, before)
	}
	if !f.s.Cancel(a.Req) {
		t.Fatal("Cancel of a refused, requeued request = false")
	}
	if got, tracked := f.keyService(0, "acme"); tracked && got != before {
		t.Errorf("service %v after the refund, want %v", got, before)
	}
	if got, want := f.s.arb.Deficit(0), deficitAfter+int64(a.Req.Cost); got != want {
		t.Errorf("deficit %d after the refund, want %d", got, want)
	}
	if got := f.s.Class(0).Keys(); got != 0 {
		t.Errorf("the class tracks %d keys, want 0 (nothing queued, nothing owed)", got)
	}
	f.now += workers.MinExclusion
	f.s.Tick(f.now, nil)
	if d := f.s.Next(f.now); d.Kind != None {
		t.Errorf("Next = %d after the cancel, want None", d.Kind)
	}
}

// TestCancelDispatchedAtArrivalRefundsNothing: a request dispatched at once
// (never arbitrated) and refused is queued as charged without having paid;
// cancelling it refunds nothing.
func TestCancelDispatchedAtArrivalRefundsNothing(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	d := f.arrive("batch", 10, func(a *request.Arrival) { a.Key = "k" })
	f.wantKind(d, Dispatch)
	f.s.Return(f.now, d.Req, d.Worker, d.Seq)
	deficit := f.s.arb.Deficit(4)
	svc, _ := f.keyService(4, "k")
	if !f.s.Cancel(d.Req) {
		t.Fatal("Cancel = false")
	}
	if got, tracked := f.keyService(4, "k"); f.s.arb.Deficit(4) != deficit || tracked && got != svc {
		t.Errorf("deficit %d service %v, want %d and %v unchanged", f.s.arb.Deficit(4), got, deficit, svc)
	}
}

// TestCancelRefundsTheBudgetOfARefusedRequest: the refund of a refused,
// requeued request includes what its first dispatch took from its key's
// token budget.
func TestCancelRefundsTheBudgetOfARefusedRequest(t *testing.T) {
	f := newFixture(t, budgetClass(1e-6, ""), filters.Thresholds{})
	f.report("w1", 5000) // busy: c queues
	a := f.arrive("c", 100, func(a *request.Arrival) { a.Key = "a" })
	f.wantKind(a, Queued)
	level := func() float64 {
		t.Helper()
		l, _, _, _, ok := f.s.Class(0).BudgetLevel(f.now, "a")
		if !ok {
			t.Fatal("key a has no budget")
		}
		return math.Round(l)
	}
	if got := level(); got != 500 {
		t.Fatalf("level %v before the dispatch, want the burst, 500", got)
	}
	f.report("w1", 0)
	d := f.s.Next(f.now)
	if d.Kind != Dispatch || d.Req != a.Req {
		t.Fatalf("Next = %d, want a dispatched", d.Kind)
	}
	f.s.Return(f.now, d.Req, d.Worker, d.Seq)
	if got := level(); got != 400 {
		t.Fatalf("level %v after the dispatch, want 400", got)
	}
	if !f.s.Cancel(a.Req) {
		t.Fatal("Cancel of a refused, requeued request = false")
	}
	if got := level(); got != 500 {
		t.Errorf("level %v after the refund, want 500", got)
	}
}
