package dispatcher

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"fairdispatch/bus"
	"fairdispatch/ingest"
	"fairdispatch/metrics"
)

// waitUntil polls cond every few milliseconds until it holds or 20 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// returns runs f on another goroutine and fails the test if it has not
// returned within 20 s (a callback blocked for good).
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

func reportJSON(id string, prefill uint64) []byte {
	b, _ := json.Marshal(map[string]any{"worker_id": id, "data_parallel_size": 1, "ttl_ms": 60000, "instance": "i",
		"ranks": []map[string]any{{"dp_rank": 0, "active_prefill_tokens": prefill}}})
	return b
}

// No NATS callback waits for the actor: with the actor not running (stopped,
// or never started), 10,000 handshake results, dead-letter completions and
// load reports each return; the old channels (capacity 4096) blocked.
func TestCallbacksNeverBlockWhileActorIsNotRunning(t *testing.T) {
	f := newFixture(t, policy)
	f.b.pubErr = nil
	const n = 10000
	returns(t, "HandshakeResult", func() {
		for i := range n {
			f.a.HandshakeResult(bus.Result{Token: uint64(i), Worker: "w1", Outcome: bus.Timeout})
		}
	})
	returns(t, "LoadReport", func() {
		for range n {
			f.a.LoadReport("w1", reportJSON("w1", 5))
		}
	})
	// The dead-letter completion callback is the one publishDead hands the bus.
	f.now = f.now.Add(time.Second)
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}})
	done := f.b.done[0]
	returns(t, "dead-letter completion", func() {
		for range n {
			done(nil)
		}
	})
	if got := f.a.results.len(); got != n {
		t.Fatalf("%d results wait, want %d: none may be dropped", got, n)
	}
	if got := f.a.dlq.len(); got != n {
		t.Fatalf("%d completions wait, want %d", got, n)
	}
	if reps := f.a.loads.take(); len(reps) != 1 || reps[0].WorkerID != "w1" {
		t.Fatalf("reports waiting %+v, want w1's latest only", reps)
	}
}

// Load reports are coalesced per worker, the latest wins, and what is
// superseded is counted.
func TestLoadReportsCoalescedAndCounted(t *testing.T) {
	f := newFixture(t, policy)
	reg := prometheus.NewRegistry()
	f.a.d.Metrics = metrics.New(reg, []string{"premium"})
	f.a.LoadReport("w1", reportJSON("w1", 1))
	f.a.LoadReport("w2", reportJSON("w2", 2))
	f.a.LoadReport("w1", reportJSON("w1", 3))
	reps := f.a.loads.take()
	if len(reps) != 2 || reps[0].WorkerID != "w1" || reps[0].Ranks[0].ActivePrefillTokens != 3 || reps[1].WorkerID != "w2" {
		t.Fatalf("reports %+v, want w1 (latest, 3 tokens) then w2", reps)
	}
	if got := counter(t, reg, "fairdispatch_load_reports_dropped_total", "reason", "superseded"); got != 1 {
		t.Fatalf("superseded reports counted %v, want 1", got)
	}
	if reps := f.a.loads.take(); len(reps) != 0 {
		t.Fatalf("second take %+v, want nothing", reps)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// Shutdown ends while callbacks keep coming: Run returns once its dispatch in
// flight is answered, although thousands of results were delivered first,
// and callbacks made after it returned (the handshaker's Close delivers a
// timeout per dispatch still in flight) return too.
func TestShutdownEndsUnderACallbackFlood(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if f.a.inFlight != 1 {
		t.Fatalf("in flight %d, want 1", f.a.inFlight)
	}
	returns(t, "HandshakeResult before Run", func() {
		for i := range 5000 {
			f.a.HandshakeResult(bus.Result{Token: uint64(100 + i), Worker: "w1", Outcome: bus.Timeout})
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); f.a.Run(ctx) }()
	cancel()
	f.a.HandshakeResult(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Timeout})
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	returns(t, "HandshakeResult after Run", func() {
		for i := range 10000 {
			f.a.HandshakeResult(bus.Result{Token: uint64(i), Worker: "w1", Outcome: bus.Timeout})
		}
	})
}

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
		d := ingest.Delivery{Msg: m, StreamSeq: s, Published: time.Now(), Token: "premium"}
		d.Headers, d.Err = ingest.Decode(hdr)
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
