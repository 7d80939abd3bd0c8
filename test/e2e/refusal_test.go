package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// docs/protocol.md, Dispatch handshake: a dispatch that is refused, unanswered, or sent to nobody leaves
// the request in its lane with its place kept, and it completes on a worker
// that accepts; a worker that dies holding accepted requests gets them
// dispatched again after the ack wait.

const frlHandshakes = "fairdispatch_handshakes_total"

// frlStartWorker starts a custom worker built on package workerkit; it is
// stopped at cleanup (handing back anything it still holds).
func frlStartWorker(t *testing.T, nc *nats.Conn, cfg workerkit.Config, h workerkit.Handler) *workerkit.Worker {
	t.Helper()
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	return startWorker(t, nc, cfg, h)
}

// frlDoneRecords counts completion records on dispatch.done.* per request id and worker.
type frlDoneRecords struct {
	mu    sync.Mutex
	byReq map[string][]string // request id -> worker ids, one per record
}

func frlRecordDone(t *testing.T, nc *nats.Conn) *frlDoneRecords {
	t.Helper()
	d := &frlDoneRecords{byReq: map[string][]string{}}
	onCompletion(t, nc, "dispatch.done.*", func(c wire.Completion) {
		d.mu.Lock()
		d.byReq[c.RequestID] = append(d.byReq[c.RequestID], c.WorkerID)
		d.mu.Unlock()
	})
	return d
}

func (d *frlDoneRecords) workers(id string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.byReq[id]...)
}

// frlWaitMetric waits until the metric's samples matching label sum to want. A
// completion record can overtake the dispatcher's handling of the acceptance,
// so counters of acceptances are polled, not read once.
func frlWaitMetric(t *testing.T, p *proc, name, label string, want float64) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%s{%s} to reach %v", name, label, want), func() bool {
		return p.metric(name, label) == want
	})
}

// frlRecordOutcomes watches, on its own connection, every outcome published
// to an inbox (where loadgen receives them) for request ids starting with
// prefix, and returns a function giving them by request id, in arrival order.
func frlRecordOutcomes(t *testing.T, url, prefix string) func() map[string][]wire.Outcome {
	t.Helper()
	nc := connect(t, url)
	var mu sync.Mutex
	got := map[string][]wire.Outcome{}
	onOutcome(t, nc, "_INBOX.>", func(o wire.Outcome) {
		if o.Status == "" || !strings.HasPrefix(o.RequestID, prefix) {
			return
		}
		mu.Lock()
		got[o.RequestID] = append(got[o.RequestID], o)
		mu.Unlock()
	})
	return func() map[string][]wire.Outcome {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string][]wire.Outcome, len(got))
		for k, v := range got {
			out[k] = append([]wire.Outcome(nil), v...)
		}
		return out
	}
}

// frlCheckAllOn checks that every request of res completed, none was rejected,
// and each ran on worker id.
func frlCheckAllOn(t *testing.T, res *loadgen.Result, n int, id string) {
	t.Helper()
	if len(res.Completions) != n || len(res.Rejected) != 0 || !res.Complete {
		t.Errorf("completed %d of %d, rejected %d %v", len(res.Completions), n, len(res.Rejected), res.Rejected)
	}
	for _, c := range res.Completions {
		if c.WorkerID != id {
			t.Errorf("request %s completed on %q, want %q", c.RequestID, c.WorkerID, id)
		}
	}
}

// frlBesideGood starts a dispatcher, then on one connection the worker
// under test, id, by start, and a slow accepting mock worker, good (while it
// holds work the idle worker under test scores better); it runs n requests
// and checks that every one completed on good.
func frlBesideGood(t *testing.T, id string, n int, start func(nc *nats.Conn)) (*proc, *mockworker.Worker) {
	t.Helper()
	f := startFixture(t)
	p, nc := f.p, f.nc
	start(nc)
	good := startMock(t, nc, mockworker.Config{ID: "good", PrefillTokensPerSec: 5000})
	waitLive(t, p, id, "good")
	frlCheckAllOn(t, runLoad(t, nc, defaultLoad(id, n)), n, "good")
	return p, good
}

// TestRefusalBusyWorkerRequestGoesElsewhere: a worker refusing with
// Dispatch-Status: busy sees offers, and every request completes on the
// worker that accepts.
func TestRefusalBusyWorkerRequestGoesElsewhere(t *testing.T) {
	const n = 40
	var offers atomic.Int64
	p, good := frlBesideGood(t, "refuser", n, func(nc *nats.Conn) {
		frlStartWorker(t, nc, workerkit.Config{ID: "refuser"}, workerkit.HandlerFunc(func(*workerkit.Request) bool {
			offers.Add(1)
			return false
		}))
	})
	if st := good.Stats(); st.Completed != n || st.Refused != 0 {
		t.Errorf("good worker stats %+v, want %d completed, 0 refused", st, n)
	}
	refused := p.metric(frlHandshakes, `outcome="refused"`)
	t.Logf("refuser saw %d offers; handshakes refused %v, accepted %v", offers.Load(), refused,
		p.metric(frlHandshakes, `outcome="accepted"`))
	if offers.Load() == 0 {
		t.Errorf("the refusing worker saw no offer")
	}
	// At most one per offer: an answer slower than the dispatch timeout counts as a timeout.
	if refused == 0 || refused > float64(offers.Load()) {
		t.Errorf("%s{outcome=\"refused\"} = %v, want > 0 and at most the refuser's offers (%d)", frlHandshakes, refused, offers.Load())
	}
	frlWaitMetric(t, p, frlHandshakes, `outcome="accepted"`, n)
	if got := p.metric("fairdispatch_rejected_total"); got != 0 {
		t.Errorf("fairdispatch_rejected_total = %v, want 0", got)
	}
}

// TestRefusalSilentWorkerTimesOut: a worker that subscribes to its work
// subject and never answers (while its load reports keep coming) costs a
// dispatch timeout per offer; the requests complete on the good worker and
// every timeout is counted.
func TestRefusalSilentWorkerTimesOut(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const n = 20
	var offers atomic.Int64
	p, _ := frlBesideGood(t, "silent", n, func(nc *nats.Conn) {
		subscribe(t, nc, "dispatch.work.silent", func(*nats.Msg) { offers.Add(1) })
		startReporter(t, nc, "silent", 0, 3*time.Second, 100*time.Millisecond)
	})
	// Every offer to the silent worker timed out before its request could
	// complete elsewhere, so the counter has caught up by now or very soon.
	waitFor(t, 20*time.Second, "one timeout counted per offer to the silent worker", func() bool {
		return offers.Load() > 0 && p.metric(frlHandshakes, `outcome="timeout"`) == float64(offers.Load())
	})
	t.Logf("silent worker got %d offers; handshakes timeout %v", offers.Load(), p.metric(frlHandshakes, `outcome="timeout"`))
	frlWaitMetric(t, p, frlHandshakes, `outcome="accepted"`, n)
}

// TestRefusalGoneWorkerNoResponders: a worker whose load reports still arrive
// but which no longer subscribes to its work subject (no responders); the
// requests complete on the good worker and the no-responder answers are counted.
func TestRefusalGoneWorkerNoResponders(t *testing.T) {
	const n = 20
	p, _ := frlBesideGood(t, "ghost", n, func(nc *nats.Conn) {
		startReporter(t, nc, "ghost", 0, 3*time.Second, 100*time.Millisecond)
	})
	nr := p.metric(frlHandshakes, `outcome="no_responders"`)
	t.Logf("handshakes no_responders %v", nr)
	if nr == 0 {
		t.Errorf("%s{outcome=\"no_responders\"} = 0, want > 0", frlHandshakes)
	}
	frlWaitMetric(t, p, frlHandshakes, `outcome="accepted"`, n)
}

// TestRefusalKilledWorkerRequestsRedispatched: a worker accepts requests and
// never finishes them, then dies (its NATS connection closes: no more
// reports, progress acks or subscription). After the ack wait its requests
// are dispatched again and each completes exactly once, on the good worker.
func TestRefusalKilledWorkerRequestsRedispatched(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const n = 8
	f := startFixture(t)
	ns, p, nc := f.ns, f.p, f.nc
	records := frlRecordDone(t, nc)
	outcomes := frlRecordOutcomes(t, ns.URL(), "killed")

	holderNC, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holderNC.Close)
	h := startHolder(t, holderNC, workerkit.Config{ID: "holder", TTL: time.Second}, true)
	waitLive(t, p, "holder")

	run := startLoad(t, nc, defaultLoad("killed", n))
	waitFor(t, 10*time.Second, "the holder to hold every request", func() bool {
		return h.w.Held() == n && p.metric(frlHandshakes, `outcome="accepted"`) == n
	})

	good := startMock(t, nc, mockworker.Config{ID: "good"})
	waitLive(t, p, "holder", "good")
	holderNC.Close() // the holder dies: no ack, no nak, no progress, no reports
	if got := good.Stats().Accepted; got != 0 {
		t.Fatalf("the good worker accepted %d requests before the holder died, want 0", got)
	}

	res := run.wait(t, time.Minute)
	frlCheckAllOn(t, res, n, "good")
	if res.Duplicates != 0 {
		t.Errorf("loadgen saw %d duplicate completion records, want 0", res.Duplicates)
	}
	js := jsOf(t, nc)
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	held := h.held()
	if len(held) != n {
		t.Errorf("the holder accepted %d requests, want %d", len(held), n)
	}
	// The records reach another subscription than loadgen's, whose callback
	// runs on a goroutine of its own: wait for one of each request before
	// counting them, rather than read them once.
	var noRecord struct{ IDs []string }
	natstest.Eventually(t, 10*time.Second, func() bool {
		noRecord.IDs = noRecord.IDs[:0]
		for _, id := range held {
			if len(records.workers(id)) == 0 {
				noRecord.IDs = append(noRecord.IDs, id)
			}
		}
		return len(noRecord.IDs) == 0
	}, "a completion record of every request the holder held (without one at the deadline: %+v)", &noRecord)
	for _, id := range held {
		if ws := records.workers(id); len(ws) != 1 || ws[0] != "good" {
			t.Errorf("request %s: completion records from %v, want exactly one from good", id, ws)
		}
	}
	if st := good.Stats(); st.Completed != n {
		t.Errorf("good worker completed %d, want %d", st.Completed, n)
	}
	t.Logf("holder accepted %d and died; the good worker completed %d after %v; accepted handshakes %v",
		len(held), good.Stats().Completed, res.Elapsed.Round(time.Millisecond), p.metric(frlHandshakes, `outcome="accepted"`))
	// Each request was dispatched twice: to the holder on its first delivery,
	// to the good worker after the redelivery. The two dispatched outcomes tell
	// them apart by attempt (docs/protocol.md, Outcomes, Redelivered requests).
	waitFor(t, 20*time.Second, "two outcomes per request", func() bool {
		all := outcomes()
		ok := len(all) == n
		for _, os := range all {
			ok = ok && len(os) >= 2
		}
		return ok
	})
	for id, os := range outcomes() {
		if len(os) != 2 || os[0].Status != "dispatched" || os[0].WorkerID != "holder" || os[0].Attempt != 1 ||
			os[1].Status != "dispatched" || os[1].WorkerID != "good" || os[1].Attempt != 2 {
			t.Errorf("request %s: outcomes %+v, want dispatched to holder with attempt 1, then to good with attempt 2", id, os)
		}
	}
}

// TestRefusalOnlyWorkerRefusedRequestWaits: with a single worker and a class
// that does not queue, a refused request is not failed: it waits in its lane
// (docs/protocol.md, Dispatch handshake: whatever its class's queueing) and is dispatched again once the
// worker reports, until the worker accepts it.
func TestRefusalOnlyWorkerRefusedRequestWaits(t *testing.T) {
	const n, refusals = 4, 3
	f := startFixture(t)
	p, nc := f.p, f.nc

	var offers atomic.Int64
	perRequest := sync.Map{} // request id -> *atomic.Int64 offers
	frlStartWorker(t, nc, workerkit.Config{ID: "fickle"}, workerkit.HandlerFunc(func(r *workerkit.Request) bool {
		offers.Add(1)
		c, _ := perRequest.LoadOrStore(r.RequestID, new(atomic.Int64))
		if c.(*atomic.Int64).Add(1) <= refusals {
			return false
		}
		// Accept and finish at once (the load never rises), with a completion record.
		go func() {
			if err := r.Done(); err != nil {
				t.Errorf("done %s: %v", r.RequestID, err)
				return
			}
			b, _ := json.Marshal(r.Completion(r.Cost, 1, false))
			_ = nc.Publish("dispatch.done.fickle", b)
		}()
		return true
	}))
	waitLive(t, p, "fickle")

	// One request at a time, each published after the previous one completed.
	// Publishing all n at once made the test flaky under load: when a later
	// request arrived after an earlier one's refusal, the only worker was
	// excluded and the new arrival in this non-queueing class was rightly
	// rejected all_workers_overloaded (docs/decisions.md: an excluded worker is
	// overloaded for selection). Only a refused request waits whatever its
	// class's queueing; a new arrival does not.
	// The worker finishes a request before the dispatcher may have read its
	// acceptance (another connection, another goroutine), and the acceptance is
	// what ends the worker's refusal back-off: wait for the dispatcher to have
	// counted it before the next arrival, which would otherwise meet the only
	// worker still excluded.
	for i := 0; i < n; i++ {
		res := runLoad(t, nc, defaultLoad(fmt.Sprintf("fickle%d", i), 1))
		frlCheckAllOn(t, res, 1, "fickle")
		waitFor(t, 20*time.Second, "the dispatcher to count the acceptance", func() bool {
			return p.metric(frlHandshakes, `outcome="accepted"`) >= float64(i+1)
		})
	}
	if got := offers.Load(); got != n*(refusals+1) {
		t.Errorf("offers = %d, want %d (%d refusals and one acceptance per request)", got, n*(refusals+1), refusals)
	}
	t.Logf("offers %d; handshakes refused %v", offers.Load(), p.metric(frlHandshakes, `outcome="refused"`))
	if got := p.metric("fairdispatch_rejected_total"); got != 0 {
		t.Errorf("fairdispatch_rejected_total = %v, want 0", got)
	}
}
