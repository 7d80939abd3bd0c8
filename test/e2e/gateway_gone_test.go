package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fairdispatch/mockworker"
)

// Issue 23, acceptance 3, through HTTP: callers that go away stop their
// requests at the workers. 100 streaming clients that disconnect after
// their first chunk are cancelled at their workers within 2 s, and a gateway
// that dies with streams open loses them within the bound of docs/protocol.md,
// Nobody listening (the workers' next ping finds no responders: 1 s plus a
// round trip); afterwards the dispatcher holds and books nothing for them.

// openStreams opens n streaming chat completions on the gateway at base,
// each long enough to run over a minute (4,000 tokens at the rig's 20 ms a token), and returns once each has its first
// chunk; cancel closes them all.
func openStreams(t *testing.T, base, key string, n int) (cancel func()) {
	t.Helper()
	ctx, cancelAll := context.WithCancel(context.Background())
	body := fmt.Sprintf(`{"model":%q,"max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"go on"}]}`, gwModel)
	var first sync.WaitGroup
	first.Add(n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				first.Done()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data: {") {
					break
				}
			}
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("stream %d: status %d", i, resp.StatusCode)
			}
			first.Done()
			<-ctx.Done() // hold the stream open until cancelled (or the gateway dies)
		}()
	}
	done := make(chan struct{})
	go func() { first.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("not every stream got its first chunk within 60 s")
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return cancelAll
}

// cancelled sums the requests the rig's workers ended before they finished.
func (r *gwRig) cancelled() uint64 {
	var n uint64
	for _, w := range r.ws {
		n += w.Stats().Cancelled
	}
	return n
}

// nothingHeld reports whether the dispatcher holds, sends and books nothing.
func (r *gwRig) nothingHeld() bool {
	v, ok := r.disp.queues()
	if !ok || v.Held != 0 || v.InFlight != 0 {
		return false
	}
	for _, w := range v.Workers {
		if w.Bookings != 0 {
			return false
		}
		for _, rk := range w.Ranks {
			if rk.ActiveRequests != 0 {
				return false
			}
		}
	}
	return true
}

func TestGatewayCallersGoneStopTheirRequests(t *testing.T) {
	w := mockworker.Config{MaxNumSeqs: 128, DecodePerToken: 20 * time.Millisecond}
	r := startGatewayRig(t, gwOptions{policy: policy(t, "one-class", "quantum", 512), workers: 2, worker: w,
		tenants: []gwTenant{{name: "acme", classes: "[default]", extra: "max_concurrent: 1000"}}})

	// 100 clients disconnect after their first chunk.
	cancel := openStreams(t, r.url, "sk-acme", 100)
	gone := time.Now()
	cancel()
	waitFor(t, 10*time.Second, "100 requests cancelled at their workers", func() bool { return r.cancelled() >= 100 })
	t.Logf("the 100 requests of clients that went away stopped at their workers within %v", time.Since(gone).Round(time.Millisecond))
	if took := time.Since(gone); took > 2*time.Second {
		t.Errorf("the 100 requests of clients that went away stopped %v after them, want within 2 s", took.Round(time.Millisecond))
	}
	waitFor(t, 10*time.Second, "nothing held or booked for them", r.nothingHeld)

	// A second gateway dies with 50 streams open.
	gw := startGateway(t, r.ns.URL(), gwConfig(gwOptions{tenants: []gwTenant{{name: "acme", classes: "[default]",
		extra: "max_concurrent: 1000"}}}), prometheus.NewRegistry(), nil)
	before := r.cancelled()
	cancel = openStreams(t, gw.url, "sk-acme", 50)
	defer cancel()
	died := time.Now()
	gw.kill()
	waitFor(t, 15*time.Second, "the dead gateway's 50 requests stopped at their workers", func() bool { return r.cancelled() >= before+50 })
	// The bound: the next ping (at most 1 s away) finds no responders, plus
	// a round trip and the engine's stop; 3 s leaves room for a loaded machine.
	t.Logf("the dead gateway's 50 requests stopped at their workers within %v", time.Since(died).Round(time.Millisecond))
	if took := time.Since(died); took > 3*time.Second {
		t.Errorf("the dead gateway's requests stopped %v after it died, want within 3 s (1 s ping + round trip)", took.Round(time.Millisecond))
	}
	waitFor(t, 10*time.Second, "nothing held or booked for them", r.nothingHeld)
}
