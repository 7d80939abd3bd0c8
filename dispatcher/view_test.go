package dispatcher

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
)

func TestViewOldestWaitAndDispatchRate(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // over the class's busy threshold: requests queue
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.now = f.now.Add(time.Second)
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.now = f.now.Add(2500 * time.Millisecond)
	f.a.publishView(f.now)
	c := f.a.View().Classes[0]
	if c.Name != "premium" || c.Pending != 2 || c.OldestWaitMs != 3500 || c.Dispatched != 0 || c.DispatchRate != 0 {
		t.Fatalf("queued: %+v; want 2 pending, oldest 3500 ms, none dispatched", c)
	}

	f.report("w1", 0)
	f.advance(time.Millisecond)
	if len(f.b.sent) != 2 {
		t.Fatalf("sent %d, want 2", len(f.b.sent))
	}
	// In flight is not queued: the oldest wait counts lanes only.
	f.a.publishView(f.now)
	if c := f.a.View().Classes[0]; c.OldestWaitMs != 0 {
		t.Fatalf("in flight: oldest wait %d ms, want 0", c.OldestWaitMs)
	}
	for _, s := range f.b.sent {
		f.a.answer(bus.Result{Token: s.token, Worker: "w1", Outcome: bus.Accepted})
	}
	f.now = f.now.Add(500 * time.Millisecond)
	f.a.publishView(f.now)
	c = f.a.View().Classes[0]
	if c.Dispatched != 2 || c.DispatchRate != 4 {
		t.Fatalf("after 2 accepted in 0.5 s: dispatched %d, rate %v; want 2, 4/s", c.Dispatched, c.DispatchRate)
	}
	f.now = f.now.Add(time.Second)
	f.a.publishView(f.now)
	if c = f.a.View().Classes[0]; c.Dispatched != 2 || c.DispatchRate != 0 {
		t.Fatalf("a second later: dispatched %d, rate %v; want 2, 0", c.Dispatched, c.DispatchRate)
	}
}

// TestViewSaysStandby: a dispatcher that does not hold the lease says so in
// its view, so that its empty queues are not read as an idle leader's.
func TestViewSaysStandby(t *testing.T) {
	f := newFixture(t, policy)
	f.a.publishView(f.now)
	if f.a.View().Standby {
		t.Fatal("the leader's view says standby")
	}
	f.a.SetLeader(false)
	f.a.publishView(f.now)
	if !f.a.View().Standby {
		t.Fatal("a standby's view does not say so")
	}
}
