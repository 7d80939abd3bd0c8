package dispatcher

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/ingest"
)

// outageFixture is a fixture whose scheduler has a no-workers timeout and
// whose actor has a pull gate (docs/design.md, Fleet outage).
func outageFixture(t *testing.T, timeout time.Duration) (*fixture, *ingest.Gate) {
	t.Helper()
	f := newFixtureWith(t, policy, fixtureConfig{noWorkersTimeout: timeout, gate: true})
	return f, f.gate
}

// advance moves the clock and runs the actor's tick and drain, as Run would.
func (f *fixture) advance(d time.Duration) {
	f.now = f.now.Add(d)
	f.a.tick(f.now)
	f.a.drain()
}

func TestActorFleetOutageHoldsAndResumes(t *testing.T) {
	f, gate := outageFixture(t, 0)
	f.advance(time.Millisecond)
	if !f.a.NoLiveWorkers() || !gate.Closed() {
		t.Fatal("no worker after the grace: want an outage with the gate closed")
	}
	f.report("w1", 0)
	if f.a.NoLiveWorkers() || gate.Closed() {
		t.Fatal("a worker reported: want the outage over and the gate open")
	}
	f.advance(61 * time.Second) // the fixture's reports have a TTL of 60 s
	if !f.a.NoLiveWorkers() || !gate.Closed() || !f.a.View().NoLiveWorkers {
		t.Fatal("w1 expired: want an outage, the gate closed, and the view saying so")
	}
	var msgs []*fakeMsg
	for i := range uint64(3) {
		msgs = append(msgs, f.deliver(10+i, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}}))
	}
	// An hour of outage: nothing sent, nothing dead-lettered, every message
	// kept alive (+WPI at least every half ack wait).
	for range 240 {
		f.advance(15 * time.Second)
	}
	if len(f.b.sent) != 0 || len(f.b.letters) != 0 || len(f.a.held) != 3 || f.a.d.Scheduler.Queued(0) != 3 {
		t.Fatalf("after an hour of outage: sent %d, letters %d, held %d; want 0, 0, 3", len(f.b.sent), len(f.b.letters), len(f.a.held))
	}
	for _, m := range msgs {
		if got := m.log(); len(got) < 100 || slices.ContainsFunc(got, func(a string) bool { return a != "+WPI" }) {
			t.Fatalf("acks of a held message during an hour of outage: %d %v..., want only +WPI, every 15 to 30 s", len(got), got[:min(3, len(got))])
		}
	}
	f.report("w1", 0)
	if gate.Closed() || f.a.NoLiveWorkers() || len(f.b.sent) != 3 {
		t.Fatalf("w1 back: gate closed %v, outage %v, sent %d; want open, over, all 3 sent at once", gate.Closed(), f.a.NoLiveWorkers(), len(f.b.sent))
	}
}
