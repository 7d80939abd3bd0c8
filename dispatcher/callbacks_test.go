package dispatcher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"fairdispatch/bus"
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
	if got := counterTotal(t, reg, "fairdispatch_load_reports_coalesced_total"); got != 1 {
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

// counterTotal returns the value of the unlabelled counter name.
func counterTotal(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("counter %s not found", name)
	return 0
}
