package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"fairdispatch/mockworker"
	"fairdispatch/workerkit"
)

// Issue 5, high availability: the leader dispatcher dies and the standby
// takes over within the lease's bound; a worker dies holding accepted
// requests; the NATS server restarts; a worker restarts under the same id.
// In every case nothing is lost: each request completes on a worker or is in
// the DLQ, the request stream ends empty, and no request completes twice
// unless a killed worker had it or its handshake was logged as timed out.

// TestHALeaderKilledStandbyTakesOver: two dispatchers with leader election
// (the default); the second stands by (/readyz 503 "standby", leader gauge 0).
// 10,000 requests flow; the leader is SIGKILLed mid-run with requests queued
// in it and in flight at workers. The standby leads within TTL + TTL/4 (plus
// the server's expiry scan) and finishes the run.
func TestHALeaderKilledStandbyTakesOver(t *testing.T) {
	const n = 10000
	const ttl = 3 * time.Second // --lease-ttl default
	ns := startNATS(t)
	url := ns.URL()
	rec := haRecord(t, connect(t, url))
	js := jsOf(t, connect(t, url))

	// Queue in the dispatcher (about four 100-token requests per worker in
	// flight), so that the leader holds requests when it dies.
	args := append(slices.Clone(haLog), "--queue-threshold", "0.05")
	p1 := startDispatcher(t, url, append(args, "--instance-id", "d1")...)
	p2 := launch(t, url, append(args, "--instance-id", "d2")...)
	haWaitStandby(t, p2)
	waitFor(t, 10*time.Second, "the first dispatcher's leader gauge at 1", func() bool { return p1.metric("fairdispatch_leader") == 1 })
	for i := 1; i <= 4; i++ {
		// Slower than the publisher, so that a backlog builds in the leader.
		haStartMock(t, rec, url, mockworker.Config{ID: fmt.Sprintf("w%d", i), PrefillTokensPerSec: 6000})
		waitLive(t, p1, fmt.Sprintf("w%d", i))
	}
	// The standby keeps its registry warm from the same reports.
	waitFor(t, 20*time.Second, "the standby to know the workers", func() bool {
		v, ok := p2.queues()
		return ok && v.hasWorker("w1") && v.hasWorker("w4")
	})

	pub := &haPublisher{run: "leader", n: n}
	start := time.Now()
	pub.start(t, connect(t, url), 32)
	waitFor(t, 60*time.Second, "1,500 completed", func() bool { return rec.completed() >= 1500 })
	v, _ := p1.queues()
	p1.kill()
	killAt := time.Now()
	atKill := rec.completed()
	t.Logf("SIGKILL of the leader %v into the run: %d published, %d completed; its last view: held %d, in flight %d",
		killAt.Sub(start).Round(time.Millisecond), pub.published.Load(), atKill, v.Held, v.InFlight)
	if n-atKill < 2000 {
		t.Fatalf("only %d requests remained at the kill; the run is too fast to test a failover mid-run", n-atKill)
	}

	ledAt := haWaitLead(t, p2, 20*time.Second)
	takeover := ledAt.Sub(killAt)
	bound := haFailoverBound(ttl)
	waitFor(t, 30*time.Second, "the new leader to dispatch", func() bool { return p2.metric("fairdispatch_dispatched_total") > 0 })
	firstDispatch := time.Since(killAt)
	t.Logf("FAILOVER: the standby leads %v after the SIGKILL (bound %v = TTL %v x 1.25 + 1 s); first dispatch by it %v after the kill; gauge %v",
		takeover.Round(time.Millisecond), bound, ttl, firstDispatch.Round(time.Millisecond), p2.metric("fairdispatch_leader"))
	if takeover > bound {
		t.Errorf("the standby took %v to lead, over the documented bound %v", takeover, bound)
	}

	pub.wait(t, 60*time.Second)
	haCheck(t, js, rec, []*haPublisher{pub}, nil, 60*time.Second, p1, p2)
	t.Logf("run ended %v after the kill (%v in all); new leader: redelivered %v, dispatched %v",
		time.Since(killAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
		p2.metric("fairdispatch_redelivered_messages_total"), p2.metric("fairdispatch_dispatched_total"))
}

// TestHAWorkerLoss: a worker (built on package workerkit, ttl 1 s) accepts
// requests and never finishes them, then dies (its NATS connection closes).
// Its unpinned requests complete on the other workers after the ack wait (4 s);
// the requests pinned to it (Dispatch-Worker) reach the DLQ as no_endpoints
// once it has expired. Nothing is lost.
func TestHAWorkerLoss(t *testing.T) {
	const n = 4000
	const ackWait = 4 * time.Second // harness --ack-wait
	ns := startNATS(t)
	url := ns.URL()
	rec := haRecord(t, connect(t, url))
	js := jsOf(t, connect(t, url))
	p := startDispatcher(t, url, haLog...)

	for i := 1; i <= 3; i++ {
		haStartMock(t, rec, url, mockworker.Config{ID: fmt.Sprintf("w%d", i), PrefillTokensPerSec: 20000})
	}
	holderNC := haConnect(t, url)
	// A hung engine: it counts the requests but reports no prefill work, so
	// that the dispatcher keeps choosing it.
	h := startHolder(t, holderNC, workerkit.Config{ID: "holder", TTL: time.Second, AckWait: ackWait}, false)
	waitLive(t, p, "w1", "w2", "w3", "holder")

	// Every tenth request is pinned to the holder.
	pinned := func(i int) bool { return i%10 == 0 }
	pub := &haPublisher{run: "wloss", n: n, rate: 800, pin: func(i int) string {
		if pinned(i) {
			return "holder"
		}
		return ""
	}}
	pub.start(t, connect(t, url), 4)
	waitFor(t, 30*time.Second, "1,600 published", func() bool { return pub.published.Load() >= 1600 })
	killAt := time.Now()
	holderNC.Close() // no ack, nak, progress or report from now on
	held := map[string]bool{}
	for _, id := range h.held() {
		held[id] = true
	}
	var heldPinned, heldFree int
	for id := range held {
		var i int
		fmt.Sscanf(id, "wloss-%d", &i)
		if pinned(i) {
			heldPinned++
		} else {
			heldFree++
		}
	}
	t.Logf("holder killed %v: it held %d accepted requests, %d pinned to it, %d unpinned", killAt.Format("15:04:05.000"), len(held), heldPinned, heldFree)
	if heldFree == 0 || heldPinned == 0 {
		t.Fatalf("the holder held %d unpinned and %d pinned requests; want some of each", heldFree, heldPinned)
	}
	waitFor(t, 10*time.Second, "the holder to expire at the dispatcher", func() bool {
		v, ok := p.queues()
		return ok && !v.hasWorker("holder") && v.At.After(killAt)
	})
	t.Logf("holder gone from /debug/queues %v after the kill (ttl 1 s; the view is refreshed every second)", time.Since(killAt).Round(time.Millisecond))

	pub.wait(t, 60*time.Second)
	verdict := haCheck(t, js, rec, []*haPublisher{pub}, []haKilled{{"holder", killAt}}, 60*time.Second, p)

	// Where did each ended? Pinned: DLQ no_endpoints; unpinned: a good worker.
	dlqAt := map[string]time.Time{}
	for _, m := range streamAll(t, js, "DISPATCH_DLQ") {
		dlqAt[m.Header.Get("Dispatch-Request-Id")] = m.Time
	}
	rec.mu.Lock()
	var lastFree, lastPinned time.Duration
	lateErrs := map[string]int{} // pinned requests the holder never had
	for i := range n {
		id := pub.id(i)
		if pinned(i) {
			e := verdict.dlq[id]
			switch {
			case held[id]:
				// Redelivered after the ack wait, when the holder has expired.
				if e != "no_endpoints" {
					t.Errorf("pinned request %s held by the dead worker: DLQ error %q (completions %v), want no_endpoints", id, e, rec.done[id])
				}
				lastPinned = max(lastPinned, dlqAt[id].Sub(killAt))
			case e == "no_endpoints" || e == "pinned_worker_overloaded":
				// Published after the death: no responders leaves the worker out
				// of selection until it expires, which the dispatcher reports as
				// pinned_worker_overloaded (filters.Overloaded counts Excluded).
				lateErrs[e]++
			default:
				t.Errorf("pinned request %s: DLQ error %q (completions %v), want no_endpoints or pinned_worker_overloaded", id, e, rec.done[id])
			}
			continue
		}
		if ws := rec.done[id]; len(ws) == 0 || slices.Contains(ws, "holder") {
			t.Errorf("unpinned request %s: completions %v (DLQ %q), want one on a good worker", id, ws, verdict.dlq[id])
		}
		if held[id] {
			lastFree = max(lastFree, rec.doneAt[id].Sub(killAt))
		}
	}
	rec.mu.Unlock()
	t.Logf("pinned requests published after the holder died, by DLQ error: %v", lateErrs)
	t.Logf("handshakes: accepted %v, timeout %v, no_responders %v, refused %v", p.metric(frlHandshakes, `outcome="accepted"`),
		p.metric(frlHandshakes, `outcome="timeout"`), p.metric(frlHandshakes, `outcome="no_responders"`), p.metric(frlHandshakes, `outcome="refused"`))
	t.Logf("WORKER LOSS RECOVERY: the last of the holder's %d unpinned requests completed elsewhere %v after the kill; "+
		"the last of its %d pinned requests reached the DLQ (no_endpoints) %v after the kill (ack wait %v, worker ttl 1 s)",
		heldFree, lastFree.Round(time.Millisecond), heldPinned, lastPinned.Round(time.Millisecond), ackWait)
	if bound := ackWait + 3*time.Second; lastFree > bound || lastPinned > bound {
		t.Errorf("recovery took %v (unpinned) and %v (pinned), want within the ack wait plus 3 s (%v)", lastFree, lastPinned, bound)
	}
}

// TestHANATSRestart: the (single) NATS server restarts on the same storage
// mid-run; the dispatcher, the workers and the publisher reconnect, and
// nothing is lost.
func TestHANATSRestart(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const n = 10000
	ns := startNATS(t)
	url := ns.URL()
	rec := haRecord(t, haConnect(t, url))
	p := startDispatcher(t, url, haLog...)
	for i := 1; i <= 4; i++ {
		haStartMock(t, rec, url, mockworker.Config{ID: fmt.Sprintf("w%d", i), PrefillTokensPerSec: 20000})
	}
	waitLive(t, p, "w1", "w2", "w3", "w4")

	pub := &haPublisher{run: "natsrestart", n: n, rate: 1000}
	start := time.Now()
	pub.start(t, haConnect(t, url), 4)
	waitFor(t, 30*time.Second, "3,000 published", func() bool { return pub.published.Load() >= 3000 })
	at := time.Now()
	ns.Restart()
	down := time.Since(at)
	before := p.metric("fairdispatch_dispatched_total") // the dispatcher is reconnecting now
	waitFor(t, 30*time.Second, "the dispatcher to dispatch again", func() bool {
		return p.metric("fairdispatch_dispatched_total") > before+100
	})
	t.Logf("NATS RESTART %v into the run (%d published, %d completed): server back after %v; dispatching again (100 more) %v after the stop",
		at.Sub(start).Round(time.Millisecond), pub.published.Load(), rec.completed(), down.Round(time.Millisecond), time.Since(at).Round(time.Millisecond))

	pub.wait(t, 60*time.Second)
	js := jsOf(t, connect(t, url))
	haCheck(t, js, rec, []*haPublisher{pub}, nil, 60*time.Second, p)
	t.Logf("run %v; publisher retries %d; dispatcher connected gauge %v, leader gauge %v; dispatcher log around the restart:\n%s",
		time.Since(start).Round(time.Millisecond), pub.retries.Load(), p.metric("fairdispatch_nats_connected"),
		p.metric("fairdispatch_leader"), strings.Join(haLogLines(p, "lease", "nats ", "role", "hand", "consumer"), "\n"))
}

// TestHAWorkerRestartSameID: a worker is stopped (it hands back what it
// holds) and a new instance starts under the same id (new instance, seen_seq
// back to 0). The dispatcher drops the old instance's bookings on the
// instance change, so the new one gets work within one report interval
// (ttl/3) of its first report. Nothing is lost.
func TestHAWorkerRestartSameID(t *testing.T) {
	const n = 6000
	const ttl = 1500 * time.Millisecond
	ns := startNATS(t)
	url := ns.URL()
	rec := haRecord(t, connect(t, url))
	js := jsOf(t, connect(t, url))
	p := startDispatcher(t, url, haLog...)
	var ws []*haMock
	for i := 1; i <= 3; i++ {
		ws = append(ws, haStartMock(t, rec, url, mockworker.Config{ID: fmt.Sprintf("w%d", i), PrefillTokensPerSec: 20000, TTL: ttl}))
	}
	waitLive(t, p, "w1", "w2", "w3")

	pub := &haPublisher{run: "wrestart", n: n, rate: 1000}
	pub.start(t, connect(t, url), 4)
	waitFor(t, 30*time.Second, "2,000 published", func() bool { return pub.published.Load() >= 2000 })
	w2 := ws[1]
	oldDone := w2.w.Stats().Completed
	startedAt := w2.restart(t)
	var first time.Time
	waitFor(t, 10*time.Second, "an acceptance by the restarted w2", func() bool {
		var ok bool
		first, ok = rec.firstOfferAfter("w2", startedAt)
		return ok
	})
	gap := first.Sub(startedAt)
	bound := ttl/3 + 500*time.Millisecond
	t.Logf("WORKER RESTART: w2 (old instance completed %d) restarted under the same id; first acceptance by the new instance %v "+
		"after its start (bound ttl/3 + 500 ms = %v)", oldDone, gap.Round(time.Millisecond), bound)
	if gap > bound {
		t.Errorf("the restarted worker got its first request %v after its start, want within %v", gap, bound)
	}
	pub.wait(t, 60*time.Second)
	haCheck(t, js, rec, []*haPublisher{pub}, nil, 60*time.Second, p)
	if c := w2.w.Stats().Completed; c == 0 {
		t.Errorf("the new instance of w2 completed nothing")
	}
	b, _ := json.Marshal(w2.w.Stats())
	t.Logf("new w2 instance stats %s", b)
}
