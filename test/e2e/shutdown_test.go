package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// TestShutdownHandsBackHeldRequests: SIGTERM with requests queued in the
// dispatcher (docs/design.md, Delivery guarantees): the dispatcher exits 0 within a few seconds, and a
// second dispatcher started right after the exit holds every one of them again
// within 4 s of the exit (they were handed back for immediate redelivery, not
// left to the 10 s ack wait, which would keep them at least 5 s). Once a free worker appears, all complete, once.
func TestShutdownHandsBackHeldRequests(t *testing.T) {
	const n = 200
	f := newFixture(t)
	ns, nc, js := f.ns, f.nc, f.js
	// busy1 reports 100000 prefill tokens, over the class's gate (1000): every
	// request queues. Nobody answers dispatch.work.busy1.
	startReporter(t, nc, "busy1", 100000, 10*time.Minute, 50*time.Millisecond)

	var mu sync.Mutex
	done := map[string]int{}
	var early []string
	onCompletion(t, nc, "dispatch.done.*", func(c wire.Completion) {
		mu.Lock()
		done[c.RequestID]++
		mu.Unlock()
	})
	subscribe(t, nc, "dispatch.work.busy1", func(m *nats.Msg) {
		mu.Lock()
		early = append(early, m.Header.Get("Dispatch-Request-Id"))
		mu.Unlock()
	})

	// An ack wait of 10 s: the held requests' keep-alives then come every 5 s
	// (half of it), so a request not handed back could not be redelivered
	// before 5 s after the exit, and the 4 s bound below tells the two apart
	// with room for a slow start of the second dispatcher.
	args := []string{"--policy-config", policyFile(t, "held"), "--log-level", "debug", "--ack-wait", "10s"}
	p1 := startDispatcher(t, ns.URL(), args...)
	waitLive(t, p1, "busy1")
	for i := range n {
		id := fmt.Sprintf("sd-%03d", i)
		publish(t, js, "dispatch.req.held", id, map[string]string{"Dispatch-ISL-Tokens": "10"}, []byte(id))
	}
	waitFor(t, 15*time.Second, "the first dispatcher to hold every request", func() bool {
		v, ok := p1.queues()
		return ok && v.Held == n && v.pending("held") == n
	})

	defer func() { t.Logf("first dispatcher log:\n%s", tail(p1.out.String(), 15)) }()
	sigAt := time.Now()
	p1.signal(syscall.SIGTERM)
	err := p1.wait(15 * time.Second)
	exitAt := time.Now()
	exitIn := exitAt.Sub(sigAt)
	if err != nil {
		t.Errorf("first dispatcher exited with %v, want status 0", err)
	}
	if exitIn > 5*time.Second {
		t.Errorf("first dispatcher took %v to exit after SIGTERM, want a few seconds at most", exitIn)
	}

	// The second dispatcher, right after the exit. The View is rebuilt about
	// every second; its own timestamp tells when the snapshot showing every
	// request held was taken, so the figure is an upper bound.
	//
	// For the record, the consumer's delivered count on the NATS side tells,
	// to within a poll, when the second dispatcher had pulled every message.
	base := consumerInfo(t, js).Delivered.Consumer
	p2 := launch(t, ns.URL(), args...)
	var heldAt, pulledAt time.Time
	waitFor(t, 20*time.Second, "the second dispatcher to hold every request", func() bool {
		if pulledAt.IsZero() && consumerInfo(t, js).Delivered.Consumer >= base+n {
			pulledAt = time.Now()
		}
		v, ok := p2.queues()
		if ok && v.Held == n && v.pending("held") == n {
			heldAt = v.At
			return true
		}
		return false
	})
	seenAt := time.Now()
	if pulledAt.IsZero() {
		pulledAt = seenAt
	}
	took := heldAt.Sub(exitAt)
	t.Logf("SIGTERM to exit: %v; exit to second dispatcher holding all %d: %v (its view snapshot, an upper bound), "+
		"%v (observed by polling); all %d redelivered to it (consumer delivered count) %v after the exit",
		exitIn.Round(time.Millisecond), n, took.Round(time.Millisecond), seenAt.Sub(exitAt).Round(time.Millisecond),
		n, pulledAt.Sub(exitAt).Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("second dispatcher held all %d requests %v after the first exited, want within 4s, before an ack wait could have run out (docs/design.md, Delivery guarantees: immediate redelivery)", n, took)
	}
	p2.waitReady()
	mu.Lock()
	if len(early) > 0 {
		t.Errorf("requests dispatched while busy1 was busy: %v", early)
	}
	mu.Unlock()

	// Free a worker: everything completes, exactly once, and the stream empties.
	startMock(t, nc, mockworker.Config{ID: "wfree"})
	waitFor(t, 30*time.Second, "every request to complete", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == n
	})
	waitFor(t, 10*time.Second, "DISPATCH_REQ to be empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	mu.Lock()
	defer mu.Unlock()
	timedOut := ecsTimedOut(p1, p2)
	excused := 0
	for i := range n {
		id := fmt.Sprintf("sd-%03d", i)
		switch c := done[id]; {
		case c > 1 && timedOut[id]:
			excused++ // docs/protocol.md, Dispatch handshake: a timeout can hide an acceptance
		case c != 1:
			t.Errorf("request %s completed %d times, want 1", id, c)
		}
	}
	if excused > 0 {
		t.Logf("%d requests ran twice after a handshake timeout (%d timeouts logged)", excused, len(timedOut))
	}
	if d := streamMsgs(t, js, "DISPATCH_DLQ"); d != 0 {
		t.Errorf("DLQ holds %d messages, want 0", d)
	}
}
