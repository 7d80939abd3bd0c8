package e2e

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/mockworker"
)

// TestHostileReplyToRefused: a producer may not aim the dispatcher's outcome at
// a subject of the dispatch protocol or at a $-subject (JetStream API, KV):
// such an outcome could pose as a load report or an API call.
func TestHostileReplyToRefused(t *testing.T) {
	// A live worker: without one the dispatcher leaves requests in the stream
	// (docs/design.md, Fleet outage).
	f, _ := startWithMock(t, mockworker.Config{})
	p, nc, js := f.p, f.nc, f.js
	var forged atomic.Int32
	subscribe(t, nc, "dispatch.load.>", func(m *nats.Msg) {
		if strings.Contains(string(m.Data), "request_id") {
			forged.Add(1)
		}
	})

	targets := []string{"dispatch.load.w1", "$KV.fairdispatch_leader.dispatcher", "$JS.API.STREAM.DELETE.DISPATCH_REQ"}
	for i, to := range targets {
		publish(t, js, "dispatch.req.default", "hostile-"+string(rune('a'+i)), map[string]string{"Dispatch-Reply-To": to}, []byte("x"))
	}
	waitFor(t, 15*time.Second, "three dead letters", func() bool { return len(streamAll(t, js, "DISPATCH_DLQ")) == 3 })
	for _, m := range streamAll(t, js, "DISPATCH_DLQ") {
		if got := m.Header.Get("Dispatch-Error"); got != "bad_request" {
			t.Errorf("%s: Dispatch-Error %q, want bad_request", m.Header.Get("Dispatch-Request-Id"), got)
		}
		if msg := m.Header.Get("Dispatch-Error-Message"); !strings.Contains(msg, "Dispatch-Reply-To") {
			t.Errorf("%s: message %q does not name Dispatch-Reply-To", m.Header.Get("Dispatch-Request-Id"), msg)
		}
	}
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	if n := forged.Load(); n != 0 {
		t.Fatalf("%d outcomes were published on dispatch.load.>", n)
	}
	if n := p.metric("fairdispatch_rejected_total", `reason="bad_request"`); n != 3 {
		t.Fatalf("bad_request rejections = %v, want 3", n)
	}
}

// TestOversizedDeadLetterStoredWithoutBody: a malformed request whose body
// leaves no room for the DLQ headers cannot be dead-lettered whole; it is
// stored without its body, saying how many bytes were dropped, and its message
// is acknowledged: nothing spins, nothing is lost silently.
func TestOversizedDeadLetterStoredWithoutBody(t *testing.T) {
	f, _ := startWithMock(t, mockworker.Config{}) // a live worker, so that the dispatcher pulls
	nc, js := f.nc, f.js
	body := make([]byte, nc.MaxPayload()-150)
	publish(t, js, "dispatch.req.default", "huge-1", map[string]string{"Dispatch-ISL-Tokens": "abc"}, body)
	waitFor(t, 15*time.Second, "the dead letter", func() bool { return len(streamAll(t, js, "DISPATCH_DLQ")) == 1 })
	m := streamAll(t, js, "DISPATCH_DLQ")[0]
	if len(m.Data) != 0 || m.Header.Get("Dispatch-Body-Dropped") != strconv.Itoa(len(body)) || m.Header.Get("Dispatch-Error") != "bad_request" {
		t.Fatalf("dead letter: %d body bytes, Dispatch-Body-Dropped %q, Dispatch-Error %q; want 0, %d, bad_request",
			len(m.Data), m.Header.Get("Dispatch-Body-Dropped"), m.Header.Get("Dispatch-Error"), len(body))
	}
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
}
