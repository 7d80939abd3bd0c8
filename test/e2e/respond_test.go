package e2e

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// The response path and cancellation end to end (docs/protocol.md, Responses
// and Cancellation): the dispatcher as a subprocess, mock workers on
// connections of their own that a test closes to kill them, producers that
// follow the protocol (rsProducer).

// TestResponseWorkerKilledBeforeFirstChunk: a worker that dies after its
// claim and before its first chunk is invisible to the caller: the request
// is redelivered, runs on another worker, and the producer sees one whole
// response, from that worker alone.
func TestResponseWorkerKilledBeforeFirstChunk(t *testing.T) {
	f := startFixture(t)
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	slowNC := connect(t, ns.URL())
	// A prefill of 1000 tokens at 50 tokens/s: 20 s without a chunk.
	startMock(t, slowNC, mockworker.Config{ID: "slow", PrefillTokensPerSec: 50, OutputTokens: 5, AckWait: 4 * time.Second})
	waitLive(t, p, "slow")

	prod := rsFollow(t, nc, "before-1")
	prod.publish(js, "default", map[string]string{wire.HeaderISLTokens: "1000"})
	waitFor(t, 10*time.Second, "the slow worker's claim", func() bool { _, _, _, claims, _ := prod.state(); return claims == 1 })
	fastNC := connect(t, ns.URL())
	fast := startMock(t, fastNC, mockworker.Config{ID: "fast", OutputTokens: 5, DecodePerToken: time.Millisecond, AckWait: 4 * time.Second})
	slowNC.Close() // killed: no more progress, pings or chunks

	waitFor(t, 30*time.Second, "the response, from the other worker", func() bool { _, end, broken, _, _ := prod.state(); return end != nil || broken != "" })
	chunks, end, broken, claims, other := prod.state()
	if broken != "" || end == nil || end.Status != wire.EndOK {
		t.Fatalf("response: end %+v broken %q, want one that ends ok", end, broken)
	}
	if chunks != 5 || end.Chunks != 5 || other != 0 || claims != 2 {
		t.Errorf("chunks %d (end says %d), of other executions %d, claims %d; want 5, 5, 0, 2", chunks, end.Chunks, other, claims)
	}
	// The mock counts a completion after its end marker is sent: wait for it.
	waitFor(t, 10*time.Second, "the other worker to count its completion", func() bool { return fast.Stats().Completed >= 1 })
	if s := fast.Stats(); s.Completed != 1 {
		t.Errorf("the other worker completed %d, want 1", s.Completed)
	}
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
}

// TestResponseWorkerKilledMidStream: a worker that dies after chunks reached
// the producer breaks the response off (the producer hears nothing for 3 s),
// and the request is not run again: the redelivery's claim is answered
// cancel and dropped.
func TestResponseWorkerKilledMidStream(t *testing.T) {
	f := startFixture(t)
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	aNC := connect(t, ns.URL())
	startMock(t, aNC, mockworker.Config{ID: "a", OutputTokens: 1000, DecodePerToken: 50 * time.Millisecond, AckWait: 4 * time.Second})
	waitLive(t, p, "a")

	prod := rsFollow(t, nc, "mid-1")
	prod.publish(js, "default", map[string]string{wire.HeaderISLTokens: "100"})
	waitFor(t, 10*time.Second, "two chunks", func() bool { n, _, _, _, _ := prod.state(); return n >= 2 })
	bNC := connect(t, ns.URL())
	b := startMock(t, bNC, mockworker.Config{ID: "b", OutputTokens: 5, DecodePerToken: time.Millisecond, AckWait: 4 * time.Second})
	aNC.Close()

	waitFor(t, 10*time.Second, "the response to break off", func() bool { _, _, broken, _, _ := prod.state(); return broken != "" })
	n, end, broken, _, _ := prod.state()
	t.Logf("broke off after %d chunks (%s)", n, broken)
	if end != nil || n < 2 {
		t.Errorf("end %+v after %d chunks, want no end and at least 2 chunks", end, n)
	}
	// The redelivery (after the ack wait) reaches b, whose claim is answered
	// cancel: it drops the request without running it.
	waitFor(t, 20*time.Second, "the redelivered request dropped", func() bool { return b.Stats().Accepted == 1 && b.Helper().Held() == 0 })
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	if s := b.Stats(); s.Completed != 0 {
		t.Errorf("the request ran again: b completed %d", s.Completed)
	}
	if _, _, _, claims, other := prod.state(); claims != 2 || other != 0 {
		t.Errorf("claims %d, chunks of other executions %d; want 2 and 0", claims, other)
	}
}

// TestResponseProducersGoAway: 100 producers go away after their first
// chunk (half unsubscribe, half also publish a cancellation): each request
// stops at its worker within 2 s (the nobody-listening bound is 1 s plus a
// round trip), and /debug/queues shows nothing queued, held or booked.
func TestResponseProducersGoAway(t *testing.T) {
	const n = 100
	f := startFixture(t)
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	var mu sync.Mutex
	stopped := map[string]time.Time{}
	onCompletion(t, nc, "dispatch.done.*", func(c wire.Completion) {
		if c.Status == wire.StatusCancelled {
			mu.Lock()
			stopped[c.RequestID] = time.Now()
			mu.Unlock()
		}
	})
	var ws []*mockworker.Worker
	for i := range 2 {
		ws = append(ws, startMock(t, connect(t, ns.URL()), mockworker.Config{ID: "w" + strconv.Itoa(i), MaxNumSeqs: 64,
			OutputTokens: 100000, DecodePerToken: 100 * time.Millisecond}))
	}
	waitLive(t, p, "w0", "w1")

	prods := make([]*rsProducer, n)
	for i := range prods {
		prods[i] = rsFollow(t, nc, fmt.Sprintf("away-%d", i))
		prods[i].publish(js, "default", map[string]string{wire.HeaderISLTokens: "64"})
	}
	gone := make([]time.Time, n)
	for i, pr := range prods {
		select {
		case <-pr.firstChunk:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no first chunk", pr.id)
		}
		gone[i] = time.Now()
		pr.goAway()
		if i%2 == 1 {
			rsCancel(t, nc, pr.id)
		}
	}
	waitFor(t, 20*time.Second, "every request stopped at its worker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stopped) == n
	})
	var worst time.Duration
	mu.Lock()
	for i, pr := range prods {
		d := stopped[pr.id].Sub(gone[i])
		worst = max(worst, d)
		if d > 2*time.Second {
			t.Errorf("%s stopped %v after its producer went away, want within 2 s", pr.id, d)
		}
	}
	mu.Unlock()
	t.Logf("the slowest stopped %v after its producer went away", worst)
	for _, w := range ws {
		if s := w.Stats(); s.Completed != 0 {
			t.Errorf("a worker completed %d, want 0", s.Completed)
		}
	}
	waitFor(t, 10*time.Second, "nothing held or booked at the dispatcher", func() bool {
		v, ok := rsQueues(p)
		if !ok || v.Held != 0 || v.InFlight != 0 || len(v.Workers) != 2 {
			return false
		}
		for _, c := range v.Classes {
			if c.Pending != 0 {
				return false
			}
		}
		for _, w := range v.Workers {
			for _, r := range w.Ranks {
				if r.BookedPrefill != 0 || r.ActiveRequests != 0 || w.Bookings != 0 {
					return false
				}
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
}

// TestCancelQueuedRequest: a request queued behind a full worker and then
// cancelled leaves with the cancelled outcome, is not dead-lettered, and
// costs its key and class nothing: the class's deficit and tracked keys are
// as before it arrived.
func TestCancelQueuedRequest(t *testing.T) {
	f := startFixture(t, "--policy-config", policyFile(t, "queue-default"))
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	startMock(t, connect(t, ns.URL()), mockworker.Config{ID: "w1", MaxActiveRequests: 1, MaxNumSeqs: 1,
		OutputTokens: 100000, DecodePerToken: 50 * time.Millisecond})
	waitLive(t, p, "w1")

	busy := rsFollow(t, nc, "busy")
	busy.publish(js, "default", map[string]string{wire.HeaderISLTokens: "100", wire.HeaderFairnessKey: "a"})
	<-busy.firstChunk
	// The baseline is the first view (rebuilt about once a second, the
	// gauges with it) that counts the busy request dispatched, so that it
	// holds the busy request's charge.
	var before wire.ClassView
	waitFor(t, 10*time.Second, "a view with the busy request dispatched", func() bool {
		v, ok := rsQueues(p)
		if ok && len(v.Classes) == 1 && v.Classes[0].Dispatched == 1 {
			before = v.Classes[0]
		}
		return before.Dispatched == 1
	})
	deficit, keys := float64(before.Deficit), float64(before.Keys)

	q := rsFollow(t, nc, "queued")
	q.publish(js, "default", map[string]string{wire.HeaderISLTokens: "300", wire.HeaderFairnessKey: "b"})
	waitFor(t, 10*time.Second, "the request queued", func() bool {
		v, ok := rsQueues(p)
		return ok && len(v.Classes) == 1 && v.Classes[0].Pending == 1
	})
	rsCancel(t, nc, "queued")
	waitFor(t, 10*time.Second, "the cancelled outcome", func() bool { return q.outcomesOf(wire.StatusCancelled) == 1 })
	frlWaitMetric(t, p, "fairdispatch_cancels_total", `where="queued"`, 1)
	waitFor(t, 10*time.Second, "the queue to empty", func() bool {
		v, ok := rsQueues(p)
		return ok && v.Classes[0].Pending == 0 && v.Held == 0
	})
	// The gauges follow the queue view, refreshed about once a second.
	waitFor(t, 10*time.Second, "key b forgotten (it owes nothing)", func() bool {
		return p.metric("fairdispatch_fairness_keys", `class="default"`) == keys
	})
	if got := p.metric("fairdispatch_drr_deficit", `class="default"`); got != deficit {
		t.Errorf("deficit %v after the cancel, want %v: nothing charged", got, deficit)
	}
	if got := p.metric("fairdispatch_dispatched_total", `class="default"`); got != 1 {
		t.Errorf("dispatched %v, want 1 (the busy one)", got)
	}
	if got := streamMsgs(t, js, "DISPATCH_DLQ"); got != 0 {
		t.Errorf("%d dead letters, want 0: a cancelled request is not dead-lettered", got)
	}
	if chunks, _, _, claims, _ := q.state(); chunks != 0 || claims != 0 {
		t.Errorf("the cancelled request reached a worker: %d claims, %d chunks", claims, chunks)
	}
	busy.goAway()
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
}

// TestCancelBeforeArrival: a cancellation of an id the dispatcher has not
// seen is remembered, and the request, published afterwards, is cancelled at
// admission: no worker is offered it.
func TestCancelBeforeArrival(t *testing.T) {
	f := startFixture(t)
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	w := startMock(t, connect(t, ns.URL()), mockworker.Config{ID: "w1"})
	waitLive(t, p, "w1")

	rsCancel(t, nc, "ahead")
	frlWaitMetric(t, p, "fairdispatch_cancels_total", `where="unknown"`, 1)
	prod := rsFollow(t, nc, "ahead")
	prod.publish(js, "default", map[string]string{wire.HeaderISLTokens: "10"})
	waitFor(t, 10*time.Second, "the cancelled outcome", func() bool { return prod.outcomesOf(wire.StatusCancelled) == 1 })
	frlWaitMetric(t, p, "fairdispatch_cancels_total", `where="admission"`, 1)
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	if s := w.Stats(); s.Accepted != 0 {
		t.Errorf("the worker accepted %d, want 0", s.Accepted)
	}
	if got := streamMsgs(t, js, "DISPATCH_DLQ"); got != 0 {
		t.Errorf("%d dead letters, want 0", got)
	}
}
