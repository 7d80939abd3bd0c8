package dispatcher

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
)

// TestViewServedCostAndQuantum: the view's classes carry the quantum,
// the requests and cost served (accepted) so far, and the age of the oldest
// request not yet accepted, with the scheduler's fields kept at the top level
// of each class's JSON.
func TestViewServedCostAndQuantum(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Accepted})
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"300"}})
	f.a.answer(bus.Result{Token: 2, Worker: "w1", Outcome: bus.Refused}) // back in the queue, not served
	f.report("w1", 5000)                                                 // busy: the request stays queued
	f.now = f.now.Add(3 * time.Second)
	f.a.publishView(f.now)

	v := f.a.View()
	if len(v.Classes) != 1 {
		t.Fatalf("got %d classes, want 1", len(v.Classes))
	}
	c := v.Classes[0]
	if c.Name != "premium" || c.Quantum != 512 || c.Dispatched != 1 || c.DispatchedCost != 100 {
		t.Errorf("got %+v, want premium, quantum 512, 1 request of cost 100 served", c)
	}
	if c.Pending != 1 || c.OldestWaitMs != 3000 {
		t.Errorf("got pending %d, oldest wait %d ms; want 1 and 3000 ms", c.Pending, c.OldestWaitMs)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Classes []map[string]any `json:"classes"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "pending_requests", "deficit", "quantum", "dispatched", "dispatched_cost", "oldest_wait_ms"} {
		if _, ok := raw.Classes[0][k]; !ok {
			t.Errorf("the class's JSON lacks %q: %s", k, b)
		}
	}
}

// BenchmarkPublishViewHeld measures a snapshot with 100,000 requests queued
// (the default --max-held): the pass over the held requests dominates.
func BenchmarkPublishViewHeld(b *testing.B) {
	f := newFixture(b, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // busy: everything queues
	hdr := nats.Header{"Dispatch-ISL-Tokens": {"512"}}
	for i := range 100000 {
		m := &fakeMsg{hdr: hdr, stream: uint64(i + 1)}
		d := m.delivery("premium", f.now.Add(time.Duration(i)))
		f.a.admit(f.now, &d)
	}
	if q := f.a.d.Scheduler.Queued(0); q != 100000 {
		b.Fatalf("queued %d, want 100000", q)
	}
	for b.Loop() {
		f.a.publishView(f.now)
	}
}
