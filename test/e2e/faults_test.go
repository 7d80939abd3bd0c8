package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/mockworker"
)

// Helpers of this file carry the prefix flt.

// fltRawPublish publishes one message with headers over a raw client
// connection, as a producer whose client does not check header names would:
// nats.go refuses to send a name such as "X/Y", the server stores it. It
// waits for the server's PONG, so the message has been processed.
func fltRawPublish(t *testing.T, url, subject string, hdr []string, body []byte) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("raw connection: %q %v", line, err)
	}
	h := "NATS/1.0\r\n" + strings.Join(hdr, "\r\n") + "\r\n\r\n"
	msg := fmt.Sprintf("CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"protocol\":1}\r\nHPUB %s %d %d\r\n%s%s\r\nPING\r\n",
		subject, len(h), len(h)+len(body), h, body)
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw connection: %v", err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("raw publish refused: %s", line)
		}
		if strings.HasPrefix(line, "PONG") {
			return
		}
	}
}

// fltHeaderSize is the size of h on the wire (NATS/1.0 header block).
func fltHeaderSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// fltWatchExcluded polls /debug/queues until stop is closed and records
// whether any worker was ever shown excluded.
func fltWatchExcluded(p *proc, stop <-chan struct{}) *atomic.Bool {
	var seen atomic.Bool
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if v, ok := p.queues(); ok {
				for _, w := range v.Workers {
					if w.Excluded {
						seen.Store(true)
					}
				}
			}
		}
	}()
	return &seen
}

// TestFaultsRequestFaultsNeverStallOtherRequests is issue 9's acceptance 2:
// with one worker and two classes, requests just under max_payload (stored
// by JetStream, too large to forward with the dispatch headers) and requests
// with a header name NATS cannot send are dead-lettered as bad_request with
// an outcome each, while every ordinary request, published before, between
// and after them, is dispatched and completed; the request stream ends empty
// and the worker is never excluded. Before the fix the first bad request was
// taken for a refusal: the worker was excluded and the request picked again
// at once, for ever, and nothing else was dispatched.
//
// Both dispatch forms (docs/protocol.md, Compact dispatch form): the worker
// asks for the header form, then for the compact one, whose frame is
// smaller than the header block, so its large requests are closer still to
// max_payload.
func TestFaultsRequestFaultsNeverStallOtherRequests(t *testing.T) {
	t.Run("header form", func(t *testing.T) { fltNeverStall(t, true, 75) })
	t.Run("compact form", func(t *testing.T) { fltNeverStall(t, false, 10) })
}

// fltNeverStall runs the test above against a worker of the given form,
// its large requests margin bytes under what JetStream stores.
func fltNeverStall(t *testing.T, headerForm bool, margin int) {
	// A dispatch timeout far above any answer time even on a loaded machine:
	// a timeout would exclude the worker for a reason this test is not about.
	f, _ := startWithMock(t, mockworker.Config{TTL: 10 * time.Second, MaxNumSeqs: 64, HeaderForm: headerForm},
		"--policy-config", policyFile(t, "faults"), "--ack-wait", "30s", "--dispatch-timeout", "10s")
	ns, nc, js, p := f.ns, f.nc, f.js, f.p
	if v, ok := p.queues(); !ok || len(v.Workers) != 1 || (v.Workers[0].Compact == 0) != headerForm {
		t.Fatalf("/debug/queues workers %+v, want w1 with compact_dispatch %v", v.Workers, !headerForm)
	}

	outcomes := map[string]ecsOutcome{}
	var mu sync.Mutex
	subscribe(t, nc, "flt.outcomes", func(m *nats.Msg) {
		var o ecsOutcome
		if json.Unmarshal(m.Data, &o) == nil {
			mu.Lock()
			if _, dup := outcomes[o.RequestID]; dup {
				t.Errorf("second outcome for %s", o.RequestID)
			}
			outcomes[o.RequestID] = o
			mu.Unlock()
		}
	})
	stop := make(chan struct{})
	excluded := fltWatchExcluded(p, stop)

	maxPayload := int(nc.MaxPayload())
	ordinary := map[string]bool{}
	bigs := map[string]int{} // request id -> body size
	headers := map[string]bool{}
	publishOrdinary := func(round int) {
		for i, class := range []string{"premium", "regular", "premium", "regular"} {
			id := fmt.Sprintf("ok-%d-%d", round, i)
			ordinary[id] = true
			publish(t, js, "dispatch.req."+class, id,
				map[string]string{"Dispatch-ISL-Tokens": "100", "Dispatch-Reply-To": "flt.outcomes"}, []byte("ordinary"))
		}
	}
	for round := range 3 {
		publishOrdinary(round)
		for i, class := range []string{"premium", "regular"} {
			id := fmt.Sprintf("big-%d-%d", round, i)
			hdr := map[string]string{"Dispatch-ISL-Tokens": "100", "Dispatch-Reply-To": "flt.outcomes"}
			// As large as JetStream stores: max_payload minus the headers and
			// a margin, so that only the dispatch headers (or the compact
			// frame's fields) push it over.
			m := nats.NewMsg("dispatch.req." + class)
			m.Header.Set("Nats-Msg-Id", id)
			for k, v := range hdr {
				m.Header.Set(k, v)
			}
			size := maxPayload - margin - fltHeaderSize(m.Header)
			bigs[id] = size
			publish(t, js, "dispatch.req."+class, id, hdr, make([]byte, size))

			hid := fmt.Sprintf("hdr-%d-%d", round, i)
			headers[hid] = true
			fltRawPublish(t, ns.URL(), "dispatch.req."+class, []string{
				"Nats-Msg-Id: " + hid, "Dispatch-ISL-Tokens: 100", "Dispatch-Reply-To: flt.outcomes", "X/Forward-Me: no",
			}, []byte("body of "+hid))
		}
	}
	publishOrdinary(3)

	total := len(ordinary) + len(bigs) + len(headers)
	waitFor(t, 30*time.Second, "an outcome for every request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == total
	})
	waitFor(t, 30*time.Second, "DISPATCH_REQ to be empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	close(stop)

	mu.Lock()
	defer mu.Unlock()
	for id := range ordinary {
		if o := outcomes[id]; o.Status != "dispatched" {
			t.Errorf("%s: outcome %+v, want dispatched", id, o)
		}
	}
	for id := range bigs {
		o := outcomes[id]
		if o.Status != "rejected" || o.Error != "bad_request" || !strings.Contains(o.Message, fmt.Sprintf("max_payload of %d bytes", maxPayload)) {
			t.Errorf("%s: outcome %+v, want bad_request naming max_payload %d", id, o, maxPayload)
		}
	}
	for id := range headers {
		if o := outcomes[id]; o.Status != "rejected" || o.Error != "bad_request" || !strings.Contains(o.Message, `"X/Forward-Me"`) {
			t.Errorf("%s: outcome %+v, want bad_request naming the header", id, o)
		}
	}

	dlq := streamAll(t, js, "DISPATCH_DLQ")
	if len(dlq) != len(bigs)+len(headers) {
		t.Errorf("DLQ holds %d letters, want %d", len(dlq), len(bigs)+len(headers))
	}
	for _, d := range dlq {
		id := d.Header.Get("Dispatch-Request-Id")
		switch {
		case bigs[id] > 0:
			if len(d.Data) != 0 || d.Header.Get("Dispatch-Body-Dropped") != fmt.Sprint(bigs[id]) {
				t.Errorf("%s: letter body %d bytes, Dispatch-Body-Dropped %q; want none and %d", id, len(d.Data), d.Header.Get("Dispatch-Body-Dropped"), bigs[id])
			}
		case headers[id]:
			if string(d.Data) != "body of "+id || d.Header.Get("Dispatch-Headers-Dropped") != `"X/Forward-Me"` {
				t.Errorf("%s: letter body %q, Dispatch-Headers-Dropped %q; want the body and the header named", id, d.Data, d.Header.Get("Dispatch-Headers-Dropped"))
			}
		default:
			t.Errorf("unexpected dead letter %q", id)
		}
		if d.Header.Get("Dispatch-Error") != "bad_request" {
			t.Errorf("%s: Dispatch-Error %q", id, d.Header.Get("Dispatch-Error"))
		}
	}

	if excluded.Load() {
		t.Error("the worker was shown excluded in /debug/queues")
	}
	for _, o := range []string{"refused", "timeout", "no_responders"} {
		if n := p.metric("fairdispatch_handshakes_total", `outcome="`+o+`"`); n != 0 {
			t.Errorf("handshakes %s = %v, want 0", o, n)
		}
	}
	if n := p.metric("fairdispatch_dispatch_send_failures_total", `fault="request"`); n != float64(len(bigs)+len(headers)) {
		t.Errorf("send failures for the request's fault = %v, want %d", n, len(bigs)+len(headers))
	}
	if n := p.metric("fairdispatch_dispatch_send_failures_total", `fault="worker"`); n != 0 {
		t.Errorf("send failures for the worker's fault = %v, want 0", n)
	}
}
