package dispatcher

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/ingest"
)

// atomicReleaser counts releases from any goroutine.
type atomicReleaser struct{ n atomic.Int64 }

func (r *atomicReleaser) Release(n int) { r.n.Add(int64(n)) }
func (r *atomicReleaser) Stop()         {}

func batchOf(seqs ...uint64) ([]ingest.Delivery, []*fakeMsg) {
	var b []ingest.Delivery
	var ms []*fakeMsg
	for _, s := range seqs {
		hdr := nats.Header{"Dispatch-ISL-Tokens": {"100"}}
		m := &fakeMsg{hdr: hdr, data: []byte("body"), stream: s}
		d := m.delivery("premium", time.Now())
		b = append(b, d)
		ms = append(ms, m)
	}
	return b, ms
}

func nakedOnce(ms []*fakeMsg) bool {
	for _, m := range ms {
		if got := m.log(); len(got) != 1 || got[0] != "-NAK" {
			return false
		}
	}
	return true
}

// runningActor is an actor on its own goroutine, with real time and consumer
// rel, that does not lead (so that it admits nothing) until told.
func runningActor(t *testing.T, rel Releaser) (*fixture, chan<- []ingest.Delivery) {
	t.Helper()
	f := newFixture(t, policy)
	f.a.cfg.Now = time.Now // the scheduler started in 2023: its grace is long over
	f.a.SetLeader(false)
	out := f.a.SetConsumer(rel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f, out
}

// Deliveries pulled in a term and not admitted when the lease is lost are
// handed back by HandBack and released to the consumer they came from.
func TestLeaseLossHandsBackDeliveriesInTheChannel(t *testing.T) {
	rel1 := &atomicReleaser{}
	f, ch1 := runningActor(t, rel1)
	batch, ms := batchOf(11, 12, 13)
	ch1 <- batch
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := f.a.HandBack(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || !nakedOnce(ms) || rel1.n.Load() != 3 {
		t.Fatalf("handed back %d, released %d, acks %v; want 3, 3 and one -NAK each", n, rel1.n.Load(), ms[0].log())
	}
}

// Deliveries of an earlier term still in its channel when a new term starts
// are handed back and released to their own consumer, never admitted with
// stale handles and counted against the new one.
func TestNewTermHandsBackTheOldTermsDeliveries(t *testing.T) {
	rel1, rel2 := &atomicReleaser{}, &atomicReleaser{}
	f, ch1 := runningActor(t, rel1)
	batch, ms := batchOf(21, 22)
	ch1 <- batch
	ch2 := f.a.SetConsumer(rel2)
	f.a.SetLeader(true)
	waitUntil(t, "the old term's deliveries handed back", func() bool { return rel1.n.Load() == 2 })
	if !nakedOnce(ms) {
		t.Fatalf("acks %v %v, want one -NAK each", ms[0].log(), ms[1].log())
	}
	f.b.mu.Lock()
	sent := len(f.b.sent)
	f.b.mu.Unlock()
	if sent != 0 {
		t.Fatalf("%d dispatches of an old term's deliveries", sent)
	}
	// The new term's deliveries are admitted and released to rel2.
	f.a.LoadReport("w1", reportJSON("w1", 0))
	b2, _ := batchOf(31)
	ch2 <- b2
	waitUntil(t, "the new term's delivery to be sent", func() bool {
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		return len(f.b.sent) == 1
	})
	f.a.HandshakeResult(bus.Result{Token: 31, Worker: "w1", Outcome: bus.Accepted})
	waitUntil(t, "the acceptance to release to rel2", func() bool { return rel2.n.Load() == 1 })
	if rel1.n.Load() != 2 {
		t.Fatalf("rel1 released %d, want 2", rel1.n.Load())
	}
}

// On shutdown, deliveries pulled and not admitted are handed back at once.
func TestShutdownHandsBackDeliveriesInTheChannel(t *testing.T) {
	rel := &atomicReleaser{}
	f := newFixture(t, policy)
	f.a.SetLeader(false) // nothing is admitted: the batch stays in the channel
	out := f.a.SetConsumer(rel)
	batch, ms := batchOf(41, 42)
	out <- batch
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.a.Run(ctx)
	if !nakedOnce(ms) || rel.n.Load() != 2 {
		t.Fatalf("released %d acks %v, want 2 and one -NAK each", rel.n.Load(), ms[0].log())
	}
}
