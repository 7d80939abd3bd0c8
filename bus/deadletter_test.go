package bus

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// doneSink records done calls.
type doneSink struct {
	mu   sync.Mutex
	errs []error
}

func (d *doneSink) done(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

func (d *doneSink) calls() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.errs)
}

func newDeadLetterer(t *testing.T, js jetstream.JetStream) *DeadLetterer {
	t.Helper()
	d, err := NewDeadLetterer(js, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return d
}

func sampleLetter() DeadLetter {
	return DeadLetter{
		Class:     "premium",
		RequestID: "req-1",
		Code:      "queue_full",
		Message:   "policy class \"premium\" queue requests limit reached\n(current=2, limit=2)",
		Subject:   "dispatch.req.prem",
		Header: nats.Header{
			"Nats-Msg-Id":          []string{"req-1"},
			"Nats-Expected-Stream": []string{"DISPATCH_REQ"},
			"Dispatch-ISL-Tokens":  []string{"100"},
			"X-Multi":              []string{"a", "b"},
			"dispatch-error":       []string{"spoofed"},
			"dispatch-subject":     []string{"dispatch.req.spoofed"},
		},
		Body: []byte("the body"),
	}
}

func lastDLQ(t *testing.T, js jetstream.JetStream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctxT(t), DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctxT(t), subject)
	if err != nil {
		t.Fatalf("get last %s: %v", subject, err)
	}
	return m
}

func dlqCount(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(ctxT(t), DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestDeadLetterStoredWithHeaders(t *testing.T) {
	js := withStreams(t, nil)
	d := newDeadLetterer(t, js)
	var sink doneSink
	dl := sampleLetter()
	if err := d.Publish(dl, sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done", func() bool { return len(sink.calls()) == 1 })
	if err := sink.calls()[0]; err != nil {
		t.Fatalf("done: %v", err)
	}
	m := lastDLQ(t, js, "dispatch.dlq.premium")
	if string(m.Data) != "the body" {
		t.Errorf("body: got %q", m.Data)
	}
	want := map[string][]string{
		"Nats-Msg-Id":            {"req-1"},
		"Dispatch-ISL-Tokens":    {"100"},
		"X-Multi":                {"a", "b"},
		"Dispatch-Error":         {"queue_full"},
		"Dispatch-Error-Message": {"policy class \"premium\" queue requests limit reached (current=2, limit=2)"},
		"Dispatch-Request-Id":    {"req-1"},
		"Dispatch-Class":         {"premium"},
		"Dispatch-Subject":       {"dispatch.req.prem"},
	}
	for k, v := range want {
		if got := m.Header.Values(k); !slices.Equal(got, v) {
			t.Errorf("header %s: got %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"Nats-Expected-Stream", "dispatch-error", "dispatch-subject"} {
		if _, ok := m.Header[k]; ok {
			t.Errorf("header %s should not be copied", k)
		}
	}
	if dl.Header.Get("Dispatch-Error") != "" {
		t.Error("Publish modified the caller's headers")
	}
	if got := d.Pending(); got != 0 {
		t.Errorf("pending: got %d, want 0", got)
	}
}

func TestDeadLetterStoredOnce(t *testing.T) {
	js := withStreams(t, nil)
	d := newDeadLetterer(t, js)
	var sink doneSink
	for range 2 {
		if err := d.Publish(sampleLetter(), sink.done); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both done", func() bool { return len(sink.calls()) == 2 })
	for _, err := range sink.calls() {
		if err != nil {
			t.Errorf("done: %v", err)
		}
	}
	if got := dlqCount(t, js); got != 1 {
		t.Errorf("DLQ messages: got %d, want 1", got)
	}
}

// TestDeadLetterRefusedForRoomEndsAtOnce: with the DLQ at its own limit
// (discard new), a letter's done gets, at JetStream's first refusal and
// without a retry, an error wrapping ErrConnectionFault and ErrStoreFull that
// names the reason; once there is room the same letter is stored.
func TestDeadLetterRefusedForRoomEndsAtOnce(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, DLQStream)
	cfg.MaxMsgs = 1
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctxT(t), "dispatch.dlq.other", []byte("an older letter")); err != nil {
		t.Fatal(err)
	}
	d := newDeadLetterer(t, js)
	var sink doneSink
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done", func() bool { return len(sink.calls()) == 1 })
	err := sink.calls()[0]
	if !errors.Is(err, ErrStoreFull) || Fault(err) != ErrConnectionFault || !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Fatalf("done(%v): want ErrStoreFull, a connection fault, naming the reason", err)
	}
	if d.Retries() != 0 || d.Pending() != 0 {
		t.Errorf("retries %d, pending %d; want 0, 0", d.Retries(), d.Pending())
	}
	cfg.MaxMsgs = 2
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done again", func() bool { return len(sink.calls()) == 2 })
	if err := sink.calls()[1]; err != nil {
		t.Fatalf("done with room: %v", err)
	}
	if got := dlqCount(t, js); got != 2 {
		t.Errorf("DLQ messages: got %d, want 2", got)
	}
}

// TestDeadLetterSurvivesRestart holds a publish unacknowledged (a silent core
// subscriber takes it and no stream exists yet), restarts the server, and
// checks that the pending publish fails with ErrDisconnected, is republished
// and stored once.
func TestDeadLetterSurvivesRestart(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	js := newJS(t, nc)

	silent, err := nats.Connect(ts.URL(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var swallowed atomic.Int32
	if _, err := silent.Subscribe("dispatch.dlq.>", func(*nats.Msg) { swallowed.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := silent.Flush(); err != nil {
		t.Fatal(err)
	}

	logger, logs := testLogger()
	d, err := NewDeadLetterer(js, "", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close(ctxT(t)) }()
	var sink doneSink
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "publish in flight", func() bool { return swallowed.Load() == 1 })
	if got := sink.calls(); len(got) != 0 {
		t.Fatalf("done before the restart: %v", got)
	}

	ts.Restart()
	waitFor(t, "reconnect", func() bool { return nc.IsConnected() })
	waitJetStream(t, js)
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "done after restart", func() bool { return len(sink.calls()) == 1 })
	if err := sink.calls()[0]; err != nil {
		t.Fatalf("done: %v", err)
	}
	if got := dlqCount(t, js); got != 1 {
		t.Errorf("DLQ messages: got %d, want 1", got)
	}
	if m := lastDLQ(t, js, "dispatch.dlq.premium"); m.Header.Get("Nats-Msg-Id") != "req-1" {
		t.Errorf("Nats-Msg-Id: got %q", m.Header.Get("Nats-Msg-Id"))
	}
	if !strings.Contains(logs.String(), "republishing") {
		t.Errorf("no disconnect retry logged:\n%s", logs.String())
	}
}

// TestDeadLetterPublishedWhileDown publishes while the server is down.
func TestDeadLetterPublishedWhileDown(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	js := newJS(t, nc)
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	d := newDeadLetterer(t, js)
	ts.Stop()
	waitFor(t, "disconnect", func() bool { return !nc.IsConnected() })
	var sink doneSink
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	ts.Restart()
	waitFor(t, "done after restart", func() bool { return len(sink.calls()) == 1 })
	if err := sink.calls()[0]; err != nil {
		t.Fatalf("done: %v", err)
	}
	if got := dlqCount(t, js); got != 1 {
		t.Errorf("DLQ messages: got %d, want 1", got)
	}
}

func TestDeadLetterCloseAbandonsAfterCtx(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts)) // no DLQ stream: the letter cannot be stored
	d, err := NewDeadLetterer(js, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var sink doneSink
	if err := d.Publish(sampleLetter(), sink.done); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close: got %v, want context.Canceled", err)
	}
	if got := sink.calls(); len(got) != 1 || !errors.Is(got[0], context.Canceled) {
		t.Errorf("done: got %v, want one context.Canceled", got)
	}
	if err := d.Publish(sampleLetter(), sink.done); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close: got %v, want ErrClosed", err)
	}
}

func TestDeadLetterRejectsBadInput(t *testing.T) {
	ts := startServer(t, nil)
	d := newDeadLetterer(t, newJS(t, connect(t, ts)))
	noop := func(error) {}
	for name, dl := range map[string]DeadLetter{
		"no request id":  {Class: "c"},
		"dotted class":   {Class: "a.b", RequestID: "r"},
		"empty class":    {RequestID: "r"},
		"wildcard class": {Class: "*", RequestID: "r"},
	} {
		if err := d.Publish(dl, noop); err == nil {
			t.Errorf("%s: got nil error", name)
		}
	}
	if err := d.Publish(sampleLetter(), nil); err == nil {
		t.Error("nil done: got nil error")
	}
}
