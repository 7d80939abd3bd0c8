package bus

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

func TestFaultClasses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{nil, nil},
		{errors.New("anything"), ErrConnectionFault},
		{ErrNotConnected, ErrConnectionFault},
		{ErrClosed, ErrConnectionFault},
		{ErrDuplicateToken, ErrConnectionFault},
		{&RequestFault{Reason: "r", Err: nats.ErrMaxPayload}, ErrRequestFault},
		{fmt.Errorf("wrapped: %w", &RequestFault{Reason: "r", Err: nats.ErrBadHeaderMsg}), ErrRequestFault},
		{fmt.Errorf("%w: %w", ErrWorkerFault, ErrInvalidSubject), ErrWorkerFault},
		{publishFault(nats.ErrMaxPayload), ErrRequestFault},
		{publishFault(nats.ErrConnectionClosed), ErrConnectionFault},
	} {
		if got := Fault(tc.err); got != tc.want {
			t.Errorf("Fault(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestHeaderNameOK(t *testing.T) {
	for _, k := range []string{"Dispatch-ISL-Tokens", "x_y", "A1", "!#$%&'*+-.^_`|~"} {
		if !HeaderNameOK(k) {
			t.Errorf("%q refused", k)
		}
	}
	for _, k := range []string{"", "X/Y", "a b", "a:b", "é", "a\x7f", "(x)", "a@b", "{}"} {
		if HeaderNameOK(k) {
			t.Errorf("%q accepted", k)
		}
	}
	// The rule is nats.go's: a header it accepts is sent, one it refuses is not.
	ts := startServer(t, nil)
	nc := connect(t, ts)
	for _, k := range []string{"X/Y", "a b", "ok-name"} {
		err := nc.PublishMsg(&nats.Msg{Subject: "x", Header: nats.Header{k: {"v"}}})
		if (err == nil) != HeaderNameOK(k) {
			t.Errorf("%q: nats.go says %v, HeaderNameOK says %v", k, err, HeaderNameOK(k))
		}
	}
}

// Send classifies its errors: a dispatch over max_payload or with a header
// NATS cannot send is the request's fault (with a reason naming the size and
// limit, or the header), an invalid worker id the worker's, a closed
// handshaker the connection's. Nothing of a failed Send stays in flight.
func TestSendClassifiesFaults(t *testing.T) {
	ts := startServer(t, func(o *server.Options) { o.MaxPayload = 4096 })
	nc := connect(t, ts)
	h, res := newHandshaker(t, nc, time.Second)
	hdr := nats.Header{"Dispatch-Request-Id": {"r1"}, "Dispatch-Class": {"premium"}}

	err := h.Send("w1", hdr, make([]byte, 4090), 1)
	var rf *RequestFault
	if !errors.As(err, &rf) || !errors.Is(err, ErrRequestFault) || !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("oversized send: %v, want a *RequestFault wrapping ErrRequestFault and nats.ErrMaxPayload", err)
	}
	size := EncodedSize(hdr, make([]byte, 4090))
	if want := fmt.Sprintf("the request is %d bytes with the dispatch headers (body 4090 bytes), over the server's max_payload of 4096 bytes", size); rf.Reason != want {
		t.Fatalf("reason %q, want %q", rf.Reason, want)
	}

	// The compact form (no headers, the frame as body) names the request's
	// own body size.
	frame := append(wire.EndHeaders(wire.AppendDispatchFields(nil, &wire.Dispatch{RequestID: "r1"})), make([]byte, 4090)...)
	err = h.Send("w1", nil, frame, 6)
	if !errors.As(err, &rf) || !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("oversized compact send: %v, want a *RequestFault wrapping nats.ErrMaxPayload", err)
	}
	if want := fmt.Sprintf("the request is %d bytes as a compact dispatch (body 4090 bytes), over the server's max_payload of 4096 bytes", len(frame)); rf.Reason != want {
		t.Fatalf("reason %q, want %q", rf.Reason, want)
	}

	bad := nats.Header{"Dispatch-Request-Id": {"r2"}, "X/Y": {"v"}, "a b": {"v"}}
	err = h.Send("w1", bad, []byte("small"), 2)
	if !errors.As(err, &rf) || !errors.Is(err, nats.ErrBadHeaderMsg) || rf.Reason != `header name "X/Y", "a b" cannot be sent over NATS` &&
		rf.Reason != `header name "a b", "X/Y" cannot be sent over NATS` {
		t.Fatalf("unsendable header: %v, want a *RequestFault naming both headers", err)
	}
	if !strings.Contains(rf.Reason, `"X/Y"`) {
		t.Fatalf("reason %q does not name X/Y", rf.Reason)
	}

	if err := h.Send("a.b", hdr, nil, 3); Fault(err) != ErrWorkerFault || !errors.Is(err, ErrInvalidSubject) {
		t.Fatalf("invalid worker id: %v, want a worker fault", err)
	}
	if n := h.InFlight(); n != 0 {
		t.Fatalf("in flight %d after failed sends, want 0", n)
	}
	if err := h.Send("w1", hdr, nil, 4); err != nil {
		t.Fatalf("ordinary send: %v", err)
	}
	waitFor(t, "the ordinary send to time out (nobody listens: no responders)", func() bool { return res.count() == 1 })
	h.Close()
	if err := h.Send("w1", hdr, nil, 5); Fault(err) != ErrConnectionFault {
		t.Fatalf("send after close: %v, want a connection fault", err)
	}
}

// storeLetter publishes dl and waits for its done; it returns done's error.
func storeLetter(t *testing.T, d *DeadLetterer, dl DeadLetter) error {
	t.Helper()
	var sink doneSink
	if err := d.Publish(dl, sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done", func() bool { return len(sink.calls()) == 1 })
	return sink.calls()[0]
}

// A header NATS cannot send is left out of the dead letter and listed in
// Dispatch-Headers-Dropped; before, the publish failed and was retried
// forever, so the letter was never stored.
func TestDeadLetterLeavesOutUnsendableHeaders(t *testing.T) {
	js := withStreams(t, nil)
	d := newDeadLetterer(t, js)
	dl := sampleLetter()
	dl.Header["X/Y"] = []string{"v"}
	dl.Header["a b"] = []string{"v"}
	if err := storeLetter(t, d, dl); err != nil {
		t.Fatalf("done: %v", err)
	}
	m := lastDLQ(t, js, "dispatch.dlq.premium")
	if got := m.Header.Get(wire.HeaderHeadersDropped); got != `"X/Y", "a b"` {
		t.Errorf("%s = %q, want the two names", wire.HeaderHeadersDropped, got)
	}
	if m.Header.Get("Dispatch-ISL-Tokens") != "100" || string(m.Data) != "the body" {
		t.Errorf("the rest of the letter is not kept: headers %v body %q", m.Header, m.Data)
	}
}

// The smaller forms: without the body (its size in Dispatch-Body-Dropped),
// and bare (no original header either).
func TestDeadLetterForms(t *testing.T) {
	js := withStreams(t, nil)
	d := newDeadLetterer(t, js)
	dl := sampleLetter()
	dl.Class, dl.DropBody = "bodiless", true
	if err := storeLetter(t, d, dl); err != nil {
		t.Fatal(err)
	}
	m := lastDLQ(t, js, "dispatch.dlq.bodiless")
	if len(m.Data) != 0 || m.Header.Get(wire.HeaderBodyDropped) != "8" || m.Header.Get("Dispatch-ISL-Tokens") != "100" {
		t.Errorf("bodiless letter: body %q, headers %v", m.Data, m.Header)
	}
	dl = sampleLetter()
	dl.Class, dl.RequestID, dl.Bare = "bare", "req-2", true
	if err := storeLetter(t, d, dl); err != nil {
		t.Fatal(err)
	}
	m = lastDLQ(t, js, "dispatch.dlq.bare")
	if len(m.Data) != 0 || m.Header.Get(wire.HeaderBodyDropped) != "8" || m.Header.Get(wire.HeaderHeadersDropped) != "all" ||
		m.Header.Get("Dispatch-ISL-Tokens") != "" || m.Header.Get(wire.HeaderError) != "queue_full" {
		t.Errorf("bare letter: body %q, headers %v", m.Data, m.Header)
	}
}

// A letter over max_payload is refused for its own sake: done gets a request
// fault, so that the caller stores a smaller one.
func TestDeadLetterTooLargeIsARequestFault(t *testing.T) {
	js := withStreams(t, func(o *server.Options) { o.MaxPayload = 4096 })
	d := newDeadLetterer(t, js)
	dl := sampleLetter()
	dl.Body = make([]byte, 5000)
	if err := storeLetter(t, d, dl); Fault(err) != ErrRequestFault || !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("done: %v, want a request fault", err)
	}
	dl.DropBody = true
	if err := storeLetter(t, d, dl); err != nil {
		t.Fatalf("bodiless: %v", err)
	}
}

// A DLQ that cannot take letters (here: no stream yet) is the connection's
// fault: the letter is retried with backoff, each retry counted, and stored
// once the stream is there; done is not called in between.
func TestDeadLetterRetriesAreCountedUntilStored(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	waitJetStream(t, js)
	d := newDeadLetterer(t, js)
	var sink doneSink
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two retries", func() bool { return d.Retries() >= 2 })
	if n := len(sink.calls()); n != 0 {
		t.Fatalf("done called %d times before the stream exists", n)
	}
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done", func() bool { return len(sink.calls()) == 1 })
	if err := sink.calls()[0]; err != nil {
		t.Fatalf("done: %v", err)
	}
}
