package caller_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/caller"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// fakeExec plays one execution of a worker on the response path
// (docs/protocol.md, Responses), message by message, so that each test
// orders claims, chunks, pings and the end as it needs.
type fakeExec struct {
	t    *testing.T
	nc   *nats.Conn
	subj string
	id   string
	exec string
}

func (e *fakeExec) msg(kind string) *nats.Msg {
	m := nats.NewMsg(e.subj)
	m.Header.Set(wire.HeaderResponse, kind)
	m.Header.Set(wire.HeaderRequestID, e.id)
	m.Header.Set(wire.HeaderExecution, e.exec)
	return m
}

// ask sends a claim or a ping and returns the answer ("" with the error).
func (e *fakeExec) ask(kind string) (string, error) {
	r, err := e.nc.RequestMsg(e.msg(kind), 2*time.Second)
	if err != nil {
		return "", err
	}
	return r.Header.Get(wire.HeaderResponse), nil
}

func (e *fakeExec) chunk(seq int, data string) {
	m := e.msg("chunk")
	m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
	m.Data = []byte(data)
	if err := e.nc.PublishMsg(m); err != nil {
		e.t.Fatal(err)
	}
}

func (e *fakeExec) end(seq int, end wire.ResponseEnd) {
	m := e.msg("end")
	m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
	m.Header.Set(wire.HeaderResponseStatus, end.Status)
	m.Data, _ = wire.MarshalResponseEnd(end)
	// The end marker is a request; any reply acknowledges it.
	if _, err := e.nc.RequestMsg(m, 2*time.Second); err != nil {
		e.t.Fatal(err)
	}
}

type fixture struct {
	t    *testing.T
	nc   *nats.Conn
	wnc  *nats.Conn // the worker's connection
	js   jetstream.JetStream
	c    *caller.Caller
	cons jetstream.Consumer
}

func setup(t *testing.T, cfg caller.Config) *fixture {
	srv, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := natstest.RequestStream(t, js, "dispatch")
	c, err := caller.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, nc: nc, wnc: natstest.Connect(t, srv), js: js, c: c, cons: natstest.PullConsumer(t, st, 30*time.Second)}
}

// start publishes a request and returns the call and the worker's view of
// it (the stored message's headers).
func (f *fixture) start(id string) (*caller.Call, nats.Header) {
	f.t.Helper()
	call, err := f.c.Start(context.Background(), caller.Request{ID: id, Class: "premium",
		Header: nats.Header{"Dispatch-ISL-Tokens": {"10"}}, Body: []byte("{}")})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(call.Close)
	batch, err := f.cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	for m := range batch.Messages() {
		_ = m.Ack()
		return call, m.Headers()
	}
	f.t.Fatal("request not stored")
	return nil, nil
}

func (f *fixture) exec(h nats.Header, name string) *fakeExec {
	return &fakeExec{t: f.t, nc: f.wnc, subj: h.Get(wire.HeaderResponseTo), id: h.Get(jetstream.MsgIDHeader), exec: name}
}

func recv(t *testing.T, call *caller.Call) (caller.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return call.Recv(ctx)
}

func TestStreamInOrder(t *testing.T) {
	f := setup(t, caller.Config{})
	call, h := f.start("r1")
	if got, want := h.Get(wire.HeaderResponseTo), "_RESP.fdgw.r1"; got != want {
		t.Fatalf("Dispatch-Response-To %q, want %q", got, want)
	}
	if h.Get(wire.HeaderReplyTo) != h.Get(wire.HeaderResponseTo) {
		t.Fatalf("Dispatch-Reply-To %q, want the response subject", h.Get(wire.HeaderReplyTo))
	}
	// The dispatcher's outcome arrives on the same subject.
	out, _ := wire.MarshalOutcome(wire.Outcome{RequestID: "r1", Status: wire.StatusDispatched, PolicyClass: "premium", WorkerID: "w1"})
	if err := f.wnc.Publish(h.Get(wire.HeaderReplyTo), out); err != nil {
		t.Fatal(err)
	}
	w := f.exec(h, "w1-1")
	if got, err := w.ask("claim"); err != nil || got != "go" {
		t.Fatalf("claim answered %q, %v; want go", got, err)
	}
	for i := 1; i <= 3; i++ {
		w.chunk(i, "c"+strconv.Itoa(i))
	}
	if got, err := w.ask("ping"); err != nil || got != "ok" {
		t.Fatalf("ping answered %q, %v; want ok", got, err)
	}
	w.end(4, wire.ResponseEnd{Status: "ok", Chunks: 3, Usage: &wire.Usage{PromptTokens: 10, CompletionTokens: 3}})

	ev, err := recv(t, call)
	if err != nil || ev.Kind != caller.EventDispatched || ev.Outcome.WorkerID != "w1" {
		t.Fatalf("first event %+v, %v; want dispatched by w1", ev, err)
	}
	for i := 1; i <= 3; i++ {
		ev, err := recv(t, call)
		if err != nil || ev.Kind != caller.EventChunk || string(ev.Data) != "c"+strconv.Itoa(i) || ev.Seq != uint64(i) {
			t.Fatalf("event %d: %+v, %v; want chunk c%d", i, ev, err, i)
		}
	}
	ev, err = recv(t, call)
	if err != nil || ev.Kind != caller.EventEnd || ev.End.Status != "ok" || ev.End.Usage.CompletionTokens != 3 {
		t.Fatalf("last event %+v, %v; want the end with usage", ev, err)
	}
	// After the end the response is over: claims and pings get cancel.
	if got, _ := f.exec(h, "w2-1").ask("claim"); got != "cancel" {
		t.Fatalf("claim after the end answered %q, want cancel", got)
	}
}

func TestRejectedOutcome(t *testing.T) {
	f := setup(t, caller.Config{})
	call, h := f.start("r2")
	out, _ := wire.MarshalOutcome(wire.Outcome{RequestID: "r2", Status: wire.StatusRejected, PolicyClass: "premium",
		Error: "queue_full", Message: "full", Details: map[string]any{"limit_kind": "requests"}})
	_ = f.wnc.Publish(h.Get(wire.HeaderReplyTo), out)
	_, err := recv(t, call)
	var rej *caller.RejectedError
	if !errors.As(err, &rej) || rej.Code != "queue_full" || rej.Class != "premium" {
		t.Fatalf("got %v, want a queue_full RejectedError", err)
	}
}

// cancels collects the request ids cancelled on dispatch.cancel.
func cancels(t *testing.T, nc *nats.Conn) func() []string {
	var mu sync.Mutex
	var ids []string
	sub, err := nc.Subscribe("dispatch.cancel", func(m *nats.Msg) {
		var c struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(m.Data, &c)
		mu.Lock()
		ids = append(ids, c.RequestID)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = nc.Flush()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ids...)
	}
}

// TestBrokenResponses: a gap, a lost last chunk, silence after a chunk and
// a ping counting more chunks than came each break the response with its
// reason, cancel the request and stop the worker. Only the silence case
// waits for BrokenAfter; the others get a BrokenAfter long enough that a
// slow machine cannot make them break for silence first.
func TestBrokenResponses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		run         func(w *fakeExec)
		want        string
		brokenAfter time.Duration // 0: 30 s
	}{
		{"gap", func(w *fakeExec) { w.chunk(1, "a"); w.chunk(3, "c") }, `chunk "3" where 2 was due`, 0},
		{"lost last chunk", func(w *fakeExec) { w.chunk(1, "a"); w.end(3, wire.ResponseEnd{Status: "ok", Chunks: 2}) }, "a chunk was lost", 0},
		{"silence", func(w *fakeExec) { w.chunk(1, "a") }, "nothing heard from the worker", 300 * time.Millisecond},
		{"ping counts more chunks", func(w *fakeExec) {
			w.chunk(1, "a")
			m := w.msg("ping")
			m.Header.Set(wire.HeaderResponseSeq, "2")
			if r, err := w.nc.RequestMsg(m, 2*time.Second); err != nil || r.Header.Get(wire.HeaderResponse) != "cancel" {
				w.t.Errorf("ping with a lost chunk answered %v, %v; want cancel", r, err)
			}
		}, "2 chunks, 1 arrived", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, caller.Config{BrokenAfter: cmp.Or(tc.brokenAfter, 30*time.Second)})
			seen := cancels(t, f.wnc)
			call, h := f.start("r3")
			w := f.exec(h, "w1-1")
			if got, _ := w.ask("claim"); got != "go" {
				t.Fatalf("claim answered %q", got)
			}
			tc.run(w)
			var err error
			for err == nil {
				_, err = recv(t, call)
			}
			var br *caller.BrokenError
			if !errors.As(err, &br) || br.Chunks != 1 || !contains(br.Reason, tc.want) {
				t.Fatalf("got %v, want a BrokenError after 1 chunk: %s", err, tc.want)
			}
			natstest.Eventually(t, 5*time.Second, func() bool { return len(seen()) == 1 && seen()[0] == "r3" }, "one cancellation of r3, got %v", seen())
			// The worker's next ping is told to stop.
			if got, _ := w.ask("ping"); got != "cancel" {
				t.Fatalf("ping after the break answered %q, want cancel", got)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A worker that dies before its first chunk is invisible: the redelivered
// request's new execution takes over and the old one is told to stop. After
// a chunk, no other execution may take the request.
func TestRedeliveryBeforeFirstChunk(t *testing.T) {
	f := setup(t, caller.Config{})
	call, h := f.start("r4")
	a, b, c := f.exec(h, "w1-1"), f.exec(h, "w2-1"), f.exec(h, "w3-1")
	if got, _ := a.ask("claim"); got != "go" {
		t.Fatalf("a's claim: %q", got)
	}
	if got, _ := b.ask("claim"); got != "go" {
		t.Fatalf("b's claim before any chunk: %q, want go", got)
	}
	if got, _ := a.ask("ping"); got != "taken" {
		t.Fatalf("superseded a's ping: %q, want taken", got)
	}
	a.chunk(1, "from a") // ignored
	b.chunk(1, "from b")
	if got, _ := c.ask("claim"); got != "taken" {
		t.Fatalf("c's claim after b's chunk: %q, want taken", got)
	}
	b.end(2, wire.ResponseEnd{Status: "ok", Chunks: 1})
	ev, err := recv(t, call)
	if err != nil || string(ev.Data) != "from b" {
		t.Fatalf("got %+v, %v; want b's chunk", ev, err)
	}
	if ev, err := recv(t, call); err != nil || ev.Kind != caller.EventEnd {
		t.Fatalf("got %+v, %v; want the end", ev, err)
	}
}

// Close of an open call cancels the request and unsubscribes: the worker's
// next ping finds no responders.
func TestCloseCancels(t *testing.T) {
	f := setup(t, caller.Config{})
	seen := cancels(t, f.wnc)
	call, h := f.start("r5")
	w := f.exec(h, "w1-1")
	if got, _ := w.ask("claim"); got != "go" {
		t.Fatalf("claim: %q", got)
	}
	w.chunk(1, "a")
	call.Close()
	if _, err := recv(t, call); !errors.Is(err, caller.ErrCancelled) {
		t.Fatalf("Recv after Close: %v, want ErrCancelled", err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return len(seen()) == 1 }, "one cancellation, got %v", seen())
	natstest.Eventually(t, 5*time.Second, func() bool {
		_, err := w.ask("ping")
		return errors.Is(err, nats.ErrNoResponders)
	}, "the ping finds no responders")
	call.Close() // idempotent, no second cancellation
	_ = f.wnc.Flush()
	if n := len(seen()); n != 1 {
		t.Fatalf("%d cancellations after a second Close, want 1", n)
	}
}

func TestDuplicateAndMaxBuffered(t *testing.T) {
	f := setup(t, caller.Config{MaxBuffered: 2})
	seen := cancels(t, f.wnc)
	call, h := f.start("r6")
	if call.Duplicate() {
		t.Fatal("first publication reported as a duplicate")
	}
	again, err := f.c.Start(context.Background(), caller.Request{ID: "r6", Class: "premium"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.Duplicate() {
		t.Fatal("second publication with the same id not reported as a duplicate")
	}
	w := f.exec(h, "w1-1")
	if got, _ := w.ask("claim"); got != "go" {
		t.Fatalf("claim: %q", got)
	}
	for i := 1; i <= 3; i++ {
		w.chunk(i, "x")
	}
	_ = f.wnc.Flush()
	// Nothing is read until the third chunk has found two waiting: the break
	// cancels the request (only the first call, not the duplicate). Reading
	// sooner could keep the reader ahead, as the test means it not to be.
	natstest.Eventually(t, 10*time.Second, func() bool { return len(seen()) == 1 }, "the call broke and cancelled, cancellations %v", seen())
	var got error
	for got == nil {
		_, got = recv(t, call)
	}
	var br *caller.BrokenError
	if !errors.As(got, &br) || !contains(br.Reason, "behind") {
		t.Fatalf("got %v, want a BrokenError for a reader too slow", got)
	}
}

// pingAll sends e's ping counting seq chunks and returns the answers that
// came until want of them had (every subscriber's, where want is their
// number), or until a second passed.
func (e *fakeExec) pingAll(seq, want int) []string {
	e.t.Helper()
	inbox := e.nc.NewInbox()
	replies, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		e.t.Fatal(err)
	}
	defer replies.Unsubscribe()
	m := e.msg(wire.MsgPing)
	m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
	m.Reply = inbox
	if err := e.nc.PublishMsg(m); err != nil {
		e.t.Fatal(err)
	}
	var got []string
	for len(got) < want {
		r, err := replies.NextMsg(time.Second)
		if err != nil {
			break
		}
		got = append(got, r.Header.Get(wire.HeaderResponse))
	}
	return got
}

// TestDuplicateAttachesBeforeTheFirstChunk: a retry with the request's id
// (another process's call, subscribed after the first call answered the
// claim) attaches to the execution while it has sent no chunk, answering
// its ping ok, and then follows the response to its end beside the first
// call. A retry that comes after the first chunk answers nothing: a taken
// would stop the response the first call reads.
func TestDuplicateAttachesBeforeTheFirstChunk(t *testing.T) {
	f := setup(t, caller.Config{})
	first, h := f.start("r8")
	w := f.exec(h, "w1-1")
	if got, _ := w.ask("claim"); got != "go" {
		t.Fatalf("claim: %q", got)
	}
	retry, err := f.c.Start(context.Background(), caller.Request{ID: "r8", Class: "premium"})
	if err != nil {
		t.Fatal(err)
	}
	defer retry.Close()
	if !retry.Duplicate() || retry.Attached() {
		t.Fatalf("retry: duplicate %v, attached %v; want a duplicate following nothing yet", retry.Duplicate(), retry.Attached())
	}
	if got := w.pingAll(0, 2); len(got) != 2 || got[0] != "ok" || got[1] != "ok" {
		t.Fatalf("a ping before the first chunk: answers %q, want ok from both calls", got)
	}
	if !retry.Attached() {
		t.Fatal("the retry did not attach")
	}
	w.chunk(1, "x")
	late, err := f.c.Start(context.Background(), caller.Request{ID: "r8", Class: "premium"})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	natstest.Eventually(t, 10*time.Second, func() bool { return first.Chunks() == 1 && retry.Chunks() == 1 }, "both calls have the chunk")
	if got := w.pingAll(1, 3); len(got) != 2 || got[0] != "ok" || got[1] != "ok" {
		t.Fatalf("a ping after the first chunk: answers %q, want ok from the two calls that have it and none from the late one", got)
	}
	w.end(2, wire.ResponseEnd{Status: wire.EndOK, Chunks: 1})
	for name, call := range map[string]*caller.Call{"first": first, "retry": retry} {
		var kinds []caller.EventKind
		for {
			ev, err := recv(t, call)
			if err != nil {
				t.Fatalf("%s: %v after %v", name, err, kinds)
			}
			kinds = append(kinds, ev.Kind)
			if ev.Kind == caller.EventEnd {
				break
			}
		}
		if kinds[len(kinds)-1] != caller.EventEnd || kinds[len(kinds)-2] != caller.EventChunk {
			t.Errorf("%s: events %v, want the chunk and the end", name, kinds)
		}
	}
	if late.Attached() || late.Chunks() != 0 {
		t.Errorf("late retry: attached %v, %d chunks; want neither", late.Attached(), late.Chunks())
	}
}

func TestPublishErrors(t *testing.T) {
	_, nc := natstest.StartServer(t) // no stream
	c, err := caller.New(nc, caller.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Start(context.Background(), caller.Request{ID: "r7", Class: "premium"})
	var pe *caller.PublishError
	if !errors.As(err, &pe) || pe.Stored != caller.StoredNo {
		t.Fatalf("publish without a stream: %v, want a PublishError, not stored", err)
	}
	if _, err := c.Start(context.Background(), caller.Request{ID: "r8", Class: "a.b"}); err == nil {
		t.Fatal("a class with a dot was accepted")
	}
	if _, err := caller.New(nc, caller.Config{ResponsePrefix: "dispatch.x"}); err == nil {
		t.Fatal("a response prefix under the dispatcher's prefix was accepted")
	}
	if got := c.ResponseSubject("a.b c"); len(got) != len("_RESP.fdgw.")+32 || contains(got[len("_RESP.fdgw."):], ".") {
		t.Fatalf("response subject of an id that is no token: %q, want _RESP.fdgw.<32 hex digits>", got)
	}
}

// TestPublishTimeout: JetStream silent (a subscriber takes the publication
// and never answers, as a stream without quorum does), Start gives up after
// PublishTimeout even when its context allows longer, as the gateway's
// request timeout does; its fate is unknown.
func TestPublishTimeout(t *testing.T) {
	_, nc := natstest.StartServer(t)
	if _, err := nc.Subscribe("dispatch.req.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := caller.New(nc, caller.Config{PublishTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err = c.Start(ctx, caller.Request{ID: "r9", Class: "premium", KeepUnconfirmed: true})
	var pe *caller.PublishError
	if !errors.As(err, &pe) || pe.Stored != caller.StoredUnknown || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || !pe.Kept || pe.Cancelled {
		t.Fatalf("publish to a silent stream: %v (context %v), want a PublishError of unknown fate after the publish timeout, kept", err, ctx.Err())
	}
	// Not kept: the id is cancelled, so that it never runs.
	cancels, err := nc.SubscribeSync("dispatch.cancel")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Start(ctx, caller.Request{ID: "r10", Class: "premium"})
	if !errors.As(err, &pe) || pe.Stored != caller.StoredUnknown || pe.Kept || !pe.Cancelled {
		t.Fatalf("not kept: %v (%+v), want it cancelled", err, pe)
	}
	if m, err := cancels.NextMsg(10 * time.Second); err != nil || !strings.Contains(string(m.Data), `"r10"`) {
		t.Fatalf("the cancellation: %v %v, want one naming r10", m, err)
	}
}

// TestClosedWhileTheAckIsAwaited: the request reached the server (a
// subscriber standing in for the stream got it; a stream stores on
// receipt), then the caller's connection closed for good before the
// acknowledgement came. Its fate is unknown, not "not stored", and the
// cancellation could not be sent: the caller is told both.
func TestClosedWhileTheAckIsAwaited(t *testing.T) {
	srv, nc := natstest.StartServer(t)
	stream := natstest.Connect(t, srv)
	if _, err := stream.Subscribe("dispatch.req.>", func(*nats.Msg) { nc.Close() }); err != nil {
		t.Fatal(err)
	}
	if err := stream.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := caller.New(nc, caller.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Start(context.Background(), caller.Request{ID: "r-closed", Class: "premium"})
	var pe *caller.PublishError
	if !errors.As(err, &pe) || pe.Stored != caller.StoredUnknown || pe.Cancelled || pe.Kept {
		t.Fatalf("closed while the ack was awaited: %v (%+v); want unknown fate, not cancelled", err, pe)
	}
}

// TestReconnectAfterTheClaim: the producer's connection is lost while the
// execution it answered go is in its prefill. An execution that pinged
// while the producer was away found nobody listening and stopped, and will
// never send a thing: once reconnected, the call gives it BrokenAfter to be
// heard from, then breaks instead of waiting forever. One that pings after
// the reconnection carries on to its end.
func TestReconnectAfterTheClaim(t *testing.T) {
	for _, alive := range []bool{false, true} {
		t.Run(map[bool]string{false: "stopped", true: "alive"}[alive], func(t *testing.T) {
			ns := natstest.Start(t, nil)
			nc, wnc := ns.Connect(t), ns.Connect(t)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			natstest.RequestStream(t, js, "dispatch")
			// Stopped, the break comes at once after its bound; alive, a
			// bound 20 pings long keeps the test off the machine's pauses.
			broken := map[bool]time.Duration{false: 300 * time.Millisecond, true: 2 * time.Second}[alive]
			c, err := caller.New(nc, caller.Config{BrokenAfter: broken})
			if err != nil {
				t.Fatal(err)
			}
			call, err := c.Start(context.Background(), caller.Request{ID: "r10", Class: "premium"})
			if err != nil {
				t.Fatal(err)
			}
			defer call.Close()
			w := &fakeExec{t: t, nc: wnc, subj: call.Subject(), id: "r10", exec: "w1-1"}
			if got, _ := w.ask("claim"); got != "go" {
				t.Fatalf("claim: %q", got)
			}
			ns.Restart()
			natstest.Eventually(t, 10*time.Second, func() bool {
				return nc.IsConnected() && wnc.IsConnected() && nc.Stats().Reconnects > 0
			}, "both connections back")
			if err := nc.Flush(); err != nil { // the call's subscription is back on the server
				t.Fatal(err)
			}
			if !alive {
				_, err := recv(t, call)
				var br *caller.BrokenError
				if !errors.As(err, &br) || !contains(br.Reason, "connection to NATS was lost") {
					t.Fatalf("got %v, want a BrokenError for the connection lost after the claim", err)
				}
				return
			}
			stop := make(chan struct{})
			go func() { // pings every 100 ms, as a live execution does every second
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						_, _ = w.ask("ping")
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), broken+time.Second)
			defer cancel()
			_, err = call.Recv(ctx) // nothing comes past the bound: the call keeps waiting
			close(stop)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("with an execution pinging after the reconnection: %v, want to wait on", err)
			}
			w.chunk(1, "x")
			w.end(2, wire.ResponseEnd{Status: wire.EndOK, Chunks: 1})
			if ev, err := recv(t, call); err != nil || ev.Kind != caller.EventChunk {
				t.Fatalf("got %+v, %v, want the chunk", ev, err)
			}
		})
	}
}

// TestStartOwnsTheResponseSubjects: a caller's header under another casing
// of Dispatch-Response-To or Dispatch-Reply-To is replaced, not sent beside
// Start's (the dispatcher refuses a header given under two casings).
func TestStartOwnsTheResponseSubjects(t *testing.T) {
	f := setup(t, caller.Config{})
	call, err := f.c.Start(context.Background(), caller.Request{ID: "casing", Class: "premium",
		Header: nats.Header{"DISPATCH-RESPONSE-TO": {"elsewhere"}, "dispatch-reply-to": {"elsewhere"}}, Body: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(call.Close)
	batch, err := f.cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		_ = m.Ack()
		for k := range m.Headers() {
			if (strings.EqualFold(k, wire.HeaderResponseTo) || strings.EqualFold(k, wire.HeaderReplyTo)) && k != wire.HeaderResponseTo && k != wire.HeaderReplyTo {
				t.Errorf("the stored request kept the caller's %s beside Start's", k)
			}
		}
		return
	}
	t.Fatal("request not stored")
}
