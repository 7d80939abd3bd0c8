package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// TestEmbeddedDataDirLocked: a second dispatcher with an embedded server on the
// data directory of a running one exits at once with an error naming the
// directory and the holder, and the first keeps running (docs/decisions.md,
// One process per data directory).
func TestEmbeddedDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	p1 := startDispatcher(t, "", "--nats-listen", freeAddr(t), "--data-dir", dir)
	p2 := launch(t, "", "--nats-listen", freeAddr(t), "--data-dir", dir)
	if err := p2.wait(15 * time.Second); err == nil {
		t.Fatalf("second dispatcher on %s exited 0, want an error", dir)
	}
	out := p2.out.String()
	for _, want := range []string{dir, fmt.Sprintf("pid %d", p1.cmd.Process.Pid)} {
		if !strings.Contains(out, want) {
			t.Errorf("second dispatcher's error does not name %q:\n%s", want, tail(out, 10))
		}
	}
	// Ready but for workers: none runs here (docs/design.md, Fleet outage).
	if code, body := p1.get("/readyz"); code != http.StatusOK && !(code == http.StatusServiceUnavailable && strings.Contains(body, "no live workers")) {
		t.Errorf("first dispatcher /readyz = %d %s after the second was refused, want 200 or 503 no live workers", code, body)
	}
}

// TestEmbeddedRestartHandsBackAtOnce: SIGTERM with requests held by a
// dispatcher running the embedded server, then a restart on the same data
// directory and port. The held requests were handed back (confirmed by the
// server before it stopped) and come back at once: every one is dispatched
// with queued_ms well below the ack wait (60 s here), which is what they would
// wait if the hand-back had been lost with the stopped server.
func TestEmbeddedRestartHandsBackAtOnce(t *testing.T) {
	const n = 50
	const ackWait = 60 * time.Second
	dir := t.TempDir()
	natsAddr := freeAddr(t)
	args := []string{"--nats-listen", natsAddr, "--data-dir", dir, "--ack-wait", ackWait.String(),
		"--policy-config", policyFile(t, "held")}
	p1 := startDispatcher(t, "", args...)
	nc := connect(t, "nats://"+natsAddr)
	js := jsOf(t, nc)
	// busy1 is over the class's gate: every request queues in the dispatcher.
	startReporter(t, nc, "busy1", 100000, 10*time.Minute, 50*time.Millisecond)

	var mu sync.Mutex
	queued := map[string]int64{}
	onOutcome(t, nc, "emb.outcomes", func(o wire.Outcome) {
		if o.Status == wire.StatusDispatched && o.QueuedMs != nil {
			mu.Lock()
			queued[o.RequestID] = *o.QueuedMs
			mu.Unlock()
		}
	})
	waitLive(t, p1, "busy1")
	for i := range n {
		id := fmt.Sprintf("emb-%03d", i)
		publish(t, js, "dispatch.req.held", id, map[string]string{"Dispatch-ISL-Tokens": "10", "Dispatch-Reply-To": "emb.outcomes"}, []byte(id))
	}
	waitFor(t, 15*time.Second, "the first dispatcher to hold every request", func() bool {
		v, ok := p1.queues()
		return ok && v.Held == n
	})
	p1.signal(syscall.SIGTERM)
	if err := p1.wait(20 * time.Second); err != nil {
		t.Fatalf("first dispatcher exited with %v, want 0\n%s", err, tail(p1.out.String(), 20))
	}
	mu.Lock()
	early := len(queued)
	mu.Unlock()
	if early > 0 {
		t.Fatalf("%d requests dispatched before the restart; busy1 should have held them all", early)
	}

	restartAt := time.Now()
	p2 := startDispatcher(t, "", args...)
	startMock(t, nc, mockworker.Config{ID: "wfree"}) // reconnects with the test's connection
	// Handed-back requests are dispatched as soon as a worker is free; lost ones
	// would wait out the 60 s ack wait. The deadline is below it.
	waitFor(t, 45*time.Second, "every request to be dispatched after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queued) == n
	})
	t.Logf("all %d dispatched %v after the restart", n, time.Since(restartAt).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	var most int64
	for id, q := range queued {
		most = max(most, q)
		if q >= ackWait.Milliseconds() {
			t.Errorf("request %s: queued_ms %d, want below the ack wait %d (it was not handed back)", id, q, ackWait.Milliseconds())
		}
	}
	t.Logf("largest queued_ms %d (ack wait %d); second dispatcher log:\n%s", most, ackWait.Milliseconds(), tail(p2.out.String(), 5))
}
