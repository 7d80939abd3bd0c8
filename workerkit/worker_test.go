package workerkit_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

const wait = 10 * time.Second

// app is a test application: it accepts while accept is true, counts every
// accepted request as 100 prefill tokens on its rank, and keeps the requests.
type app struct {
	w      *workerkit.Worker
	mu     sync.Mutex
	accept bool
	held   []*workerkit.Request
	load   map[int]workerkit.RankLoad
}

func (a *app) Offer(r *workerkit.Request) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.accept {
		return false
	}
	a.held = append(a.held, r)
	l := a.load[r.DPRank]
	l.ActivePrefillTokens += 100
	l.ActiveRequests++
	a.load[r.DPRank] = l
	if err := a.w.SetLoad(r.DPRank, l); err != nil {
		panic(err)
	}
	return true
}

func (a *app) finish(t *testing.T, i int, f func(*workerkit.Request) error) {
	t.Helper()
	a.mu.Lock()
	r := a.held[i]
	l := a.load[r.DPRank]
	l.ActivePrefillTokens -= 100
	l.ActiveRequests--
	a.load[r.DPRank] = l
	if err := a.w.SetLoad(r.DPRank, l); err != nil {
		t.Fatal(err)
	}
	a.mu.Unlock()
	if err := f(r); err != nil {
		t.Fatalf("finish request %d: %v", i, err)
	}
}

// setAccept makes the application accept (on) or refuse offers from now on.
func (a *app) setAccept(on bool) {
	a.mu.Lock()
	a.accept = on
	a.mu.Unlock()
}

func (a *app) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

func startWorker(t *testing.T, nc *nats.Conn, cfg workerkit.Config) *app {
	t.Helper()
	a := &app{accept: true, load: map[int]workerkit.RankLoad{}}
	w, err := workerkit.New(nc, cfg, a, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	a.w = w
	if err := w.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return a
}

func dispatchMsg(id string, seq uint64, rank int, ack string) *nats.Msg {
	m := nats.NewMsg("dispatch.work.w1")
	m.Header.Set("Dispatch-Request-Id", id)
	m.Header.Set("Dispatch-Class", "premium")
	m.Header.Set("Dispatch-DP-Rank", strconv.Itoa(rank))
	m.Header.Set("Dispatch-Seq", strconv.FormatUint(seq, 10))
	m.Header.Set("Dispatch-Cost", "100")
	if ack != "" {
		m.Header.Set("Dispatch-Ack", ack)
	}
	m.Data = []byte("body-" + id)
	return m
}

func TestAcceptAndRefuse(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", DPStart: 2, DPSize: 2})

	dispatch := func(id string, seq uint64, rank int) *nats.Msg {
		t.Helper()
		resp, err := nc.RequestMsg(dispatchMsg(id, seq, rank, ""), wait)
		if err != nil {
			t.Fatalf("dispatch %s: %v", id, err)
		}
		return resp
	}
	resp := dispatch("r1", 1, 3)
	if got := resp.Header.Get("Dispatch-Status"); got != "" || len(resp.Data) != 0 {
		t.Errorf("accept reply: got status %q body %q, want empty", got, resp.Data)
	}
	a.mu.Lock()
	r := a.held[0]
	a.mu.Unlock()
	if r.RequestID != "r1" || r.Class != "premium" || r.DPRank != 3 || r.Seq != 1 || r.Cost != 100 || string(r.Data) != "body-r1" {
		t.Errorf("parsed request: got %+v", r)
	}

	a.setAccept(false)
	if got := dispatch("r2", 2, 2).Header.Get("Dispatch-Status"); got != "busy" {
		t.Errorf("refusal: got status %q, want busy", got)
	}

	// A rank outside [2, 4) is refused without asking the application.
	a.setAccept(true)
	if got := dispatch("r3", 3, 4).Header.Get("Dispatch-Status"); got != "busy" {
		t.Errorf("out-of-range rank: got status %q, want busy", got)
	}
	if got := a.count(); got != 1 {
		t.Errorf("accepted requests: got %d, want 1", got)
	}
}

func TestHeaderValueCaseInsensitive(t *testing.T) {
	h := nats.Header{"dispatch-seq": {"7", "8"}, "DISPATCH-CLASS": {"x"}}
	if got := workerkit.HeaderValue(h, "Dispatch-Seq"); got != "7" {
		t.Errorf("got %q, want 7", got)
	}
	if got := workerkit.HeaderValue(h, "Dispatch-Class"); got != "x" {
		t.Errorf("got %q, want x", got)
	}
	if got := workerkit.HeaderValue(h, "Dispatch-Cost"); got != "" {
		t.Errorf("got %q, want empty", got)
	}
}

func TestConfigValidation(t *testing.T) {
	many := make([]string, wire.MaxTaints+1) // the dispatcher would drop every report
	for i := range many {
		many[i] = "t" + strconv.Itoa(i)
	}
	for _, cfg := range []workerkit.Config{
		{ID: "w", Taints: many},
		{ID: ""}, {ID: "a.b"}, {ID: "w", Prefix: "x.*"}, {ID: "w", Prefix: "x/y"}, {ID: "w", Prefix: "x+y"}, {ID: "w", DPStart: -1},
		{ID: "w", DPStart: 65535, DPSize: 2}, {ID: "w", Taints: []string{"a b"}},
		{ID: "w", TTL: time.Millisecond},
	} {
		if _, err := workerkit.New(&nats.Conn{}, cfg, workerkit.HandlerFunc(func(*workerkit.Request) bool { return true }), zerolog.Nop()); err == nil {
			t.Errorf("config %+v: got no error, want one", cfg)
		}
	}
}

// jsFixture is a real work-queue stream and pull consumer, so Dispatch-Ack is
// a real JetStream ack subject.
type jsFixture struct {
	st jetstream.Stream
	c  jetstream.Consumer
	js jetstream.JetStream
}

func newJS(t *testing.T, nc *nats.Conn, ackWait time.Duration) *jsFixture {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := natstest.RequestStream(t, js, "dispatch")
	return &jsFixture{st: st, c: natstest.PullConsumer(t, st, ackWait), js: js}
}

// restartFixture is a jsFixture on a file-stored work queue of a server that
// restarts on the same port and storage, with a producer connection nc and a
// worker connection wnc that reconnect forever.
type restartFixture struct {
	*jsFixture
	ns      *natstest.Server
	nc, wnc *nats.Conn
	ackWait time.Duration
}

func newRestartFixture(t *testing.T, ackWait time.Duration) *restartFixture {
	t.Helper()
	ns := natstest.Start(t, nil)
	nc, wnc := ns.Connect(t), ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return &restartFixture{jsFixture: &jsFixture{st: st, c: natstest.PullConsumer(t, st, ackWait), js: js},
		ns: ns, nc: nc, wnc: wnc, ackWait: ackWait}
}

// requireAckedGone waits until the stream holds no message, then checks
// that none is redelivered after the ack wait: every acknowledgement took.
func (f *restartFixture) requireAckedGone(t *testing.T) {
	t.Helper()
	natstest.Eventually(t, wait, func() bool {
		info, err := f.st.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, "the acknowledged messages removed")
	b, err := f.c.Fetch(1, jetstream.FetchMaxWait(f.ackWait+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		t.Errorf("redelivered after a confirmed ack: %q", m.Data())
	}
}

func (f *jsFixture) publish(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if _, err := f.js.Publish(context.Background(), "dispatch.req.premium", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *jsFixture) fetch(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	var out []jetstream.Msg
	deadline := time.Now().Add(wait)
	for len(out) < n && time.Now().Before(deadline) {
		b, err := f.c.Fetch(n-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, m)
		}
	}
	if len(out) != n {
		t.Fatalf("fetch: got %d messages, want %d", len(out), n)
	}
	return out
}

func (f *jsFixture) msgs(t *testing.T) uint64 {
	t.Helper()
	info, err := f.st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// redeliveredUntil fetches, and acknowledges, every message delivered until
// end, and returns their bodies: what came again while something else held
// its ack pending.
func (f *jsFixture) redeliveredUntil(t *testing.T, end time.Time) []string {
	t.Helper()
	var out []string
	for time.Now().Before(end) {
		b, err := f.c.Fetch(2, jetstream.FetchMaxWait(time.Until(end)))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			out = append(out, string(m.Data()))
			if err := m.Ack(); err != nil { // done with
				t.Fatal(err)
			}
		}
	}
	return out
}

func TestDoneRemovesAndNakRedelivers(t *testing.T) {
	_, nc := natstest.StartServer(t)
	f := newJS(t, nc, 30*time.Second)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	f.publish(t, 2)
	ms := f.fetch(t, 2)
	for i, m := range ms {
		if _, err := nc.RequestMsg(dispatchMsg("r"+strconv.Itoa(i), uint64(i+1), 0, m.Reply()), wait); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, wait, func() bool { return a.count() == 2 }, "two requests accepted")

	a.finish(t, 0, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { return f.msgs(t) == 1 }, "acked message removed")
	a.mu.Lock()
	if err := a.held[0].Done(); err != workerkit.ErrFinished {
		t.Errorf("second Done: got %v, want ErrFinished", err)
	}
	a.mu.Unlock()

	a.finish(t, 1, (*workerkit.Request).Nak)
	re := f.fetch(t, 1)[0]
	meta, err := re.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if meta.NumDelivered != 2 || string(re.Data()) != string(ms[1].Data()) {
		t.Errorf("redelivery: got delivery %d of %q, want 2 of %q", meta.NumDelivered, re.Data(), ms[1].Data())
	}
	if err := re.Ack(); err != nil {
		t.Fatal(err)
	}
}

func TestDoneSyncConfirms(t *testing.T) {
	_, nc := natstest.StartServer(t)
	f := newJS(t, nc, 30*time.Second)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	if _, err := nc.RequestMsg(dispatchMsg("r0", 1, 0, m.Reply()), wait); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a.finish(t, 0, func(r *workerkit.Request) error { return r.DoneSync(ctx) })
	if got := f.msgs(t); got != 0 {
		t.Errorf("messages after confirmed ack: got %d, want 0", got)
	}
}

// TestProgressPreventsRedelivery holds one accepted request for more than
// twice the ack wait, beside a control message nobody works on: the control
// is redelivered, the held request is not.
func TestProgressPreventsRedelivery(t *testing.T) {
	_, nc := natstest.StartServer(t)
	const ackWait = time.Second
	f := newJS(t, nc, ackWait)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", AckWait: ackWait})
	f.publish(t, 2)
	ms := f.fetch(t, 2)
	held, control := ms[0], ms[1]
	if _, err := nc.RequestMsg(dispatchMsg("held", 1, 0, held.Reply()), wait); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(2*ackWait + ackWait/2)
	redelivered := f.redeliveredUntil(t, end)
	if len(redelivered) != 1 || redelivered[0] != string(control.Data()) {
		t.Fatalf("redelivered: got %q, want only the control %q", redelivered, control.Data())
	}
	a.finish(t, 0, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { return f.msgs(t) == 0 }, "held message acked")
}

// reports collects load reports of one worker.
type reports struct {
	mu   sync.Mutex
	raws []map[string]json.RawMessage
	reps []workerkit.Report
}

func subscribeReports(t *testing.T, nc *nats.Conn, subj string) *reports {
	t.Helper()
	rs := &reports{}
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		var raw map[string]json.RawMessage
		var rep workerkit.Report
		if err := json.Unmarshal(m.Data, &raw); err != nil {
			t.Errorf("report %s: %v", m.Data, err)
			return
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Errorf("report %s: %v", m.Data, err)
			return
		}
		rs.mu.Lock()
		rs.raws = append(rs.raws, raw)
		rs.reps = append(rs.reps, rep)
		rs.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return rs
}

func (rs *reports) last() (workerkit.Report, map[string]json.RawMessage, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.reps) == 0 {
		return workerkit.Report{}, nil, false
	}
	return rs.reps[len(rs.reps)-1], rs.raws[len(rs.raws)-1], true
}

func (rs *reports) all() []workerkit.Report {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]workerkit.Report(nil), rs.reps...)
}

func TestLoadReports(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1", DPStart: 4, DPSize: 2, TotalKVBlocks: 1000,
		Taints: []string{"h200", "zone-a"}, TTL: 600 * time.Millisecond})

	natstest.Eventually(t, wait, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	rep, raw, _ := rs.last()
	if _, ok := raw["max_num_batched_tokens"]; ok {
		t.Errorf("max_num_batched_tokens present with 0 (unknown): %s", raw["max_num_batched_tokens"])
	}
	if _, ok := raw["seen_seq"]; !ok {
		t.Errorf("seen_seq missing from the first report")
	}
	want := workerkit.Report{WorkerID: "w1", DPStart: 4, DPSize: 2, TotalKVBlocks: 1000,
		Taints: []string{"h200", "zone-a"}, TTLMs: 600, Instance: a.w.Instance(),
		Ranks: []workerkit.RankReport{{DPRank: 4}, {DPRank: 5}}, CompactDispatch: wire.CompactDispatch}
	if got, _ := json.Marshal(rep); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("first report:\ngot  %s\nwant %s", got, must(json.Marshal(want)))
	}

	// Reports keep coming without changes (heartbeat at ttl/3).
	n := len(rs.all())
	natstest.Eventually(t, wait, func() bool { return len(rs.all()) >= n+2 }, "heartbeat reports")

	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := nc.RequestMsg(dispatchMsg("r"+strconv.FormatUint(seq, 10), seq*10, 5, ""), wait); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, wait, func() bool { r, _, _ := rs.last(); return r.SeenSeq == 30 }, "seen_seq 30")
	rep, _, _ = rs.last()
	if got := rep.Ranks[1]; got.ActivePrefillTokens != 300 || got.ActiveRequests != 3 {
		t.Errorf("rank 5 load: got %+v, want 300 tokens, 3 requests", got)
	}
	// Invariant: every report counts (100 tokens each) every accepted request up
	// to its seen_seq, none finished yet.
	for _, r := range rs.all() {
		if got, want := r.Ranks[1].ActivePrefillTokens, r.SeenSeq/10*100; got != want {
			t.Errorf("report seen_seq %d counts %d tokens, want %d", r.SeenSeq, got, want)
		}
	}

	// A refused request advances seen_seq too; finishing lowers the load.
	a.setAccept(false)
	if _, err := nc.RequestMsg(dispatchMsg("r4", 40, 5, ""), wait); err != nil {
		t.Fatal(err)
	}
	a.finish(t, 0, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool {
		r, _, _ := rs.last()
		return r.SeenSeq == 40 && r.Ranks[1].ActiveRequests == 2
	}, "seen_seq 40 with two requests")

	a.w.SetDraining(true)
	natstest.Eventually(t, wait, func() bool { r, _, _ := rs.last(); return r.Draining }, "draining report")
}

func TestStopHandsBackHeldRequests(t *testing.T) {
	_, nc := natstest.StartServer(t)
	f := newJS(t, nc, 30*time.Second)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	if _, err := nc.RequestMsg(dispatchMsg("r0", 1, 0, m.Reply()), wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return a.w.Held() == 1 }, "request held")
	if err := a.w.Close(); err == nil {
		t.Errorf("close with a held request: got nil, want an error")
	}
	re := f.fetch(t, 1)[0]
	if string(re.Data()) != string(m.Data()) {
		t.Errorf("redelivered after close: got %q, want %q", re.Data(), m.Data())
	}
	_ = re.Ack()
	natstest.Eventually(t, wait, func() bool { r, _, _ := rs.last(); return r.Draining }, "last report draining")
	if _, err := nc.Request("dispatch.work.w1", nil, 200*time.Millisecond); err == nil {
		t.Errorf("dispatch after close: got a reply, want no responders")
	}
}

// TestStopWaitsForHeldRequests: Stop waits for the requests held, and keeps
// answering while it drains: a second dispatch of a request it runs joins it
// (refusing would send it to another worker to run twice) and a new one is
// refused busy, until the dispatcher reads the draining report.
func TestStopWaitsForHeldRequests(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	if _, err := nc.RequestMsg(dispatchMsg("r0", 1, 0, ""), wait); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- a.w.Stop(context.Background()) }()
	natstest.Eventually(t, wait, func() bool { r, _, _ := rs.last(); return r.Draining }, "draining reported")
	if resp, err := nc.RequestMsg(dispatchMsg("r0", 2, 0, ""), wait); err != nil || resp.Header.Get("Dispatch-Status") != "" {
		t.Errorf("a second dispatch of running r0 while draining: %v %v, want it accepted (joined)", err, resp)
	}
	if resp, err := nc.RequestMsg(dispatchMsg("r1", 3, 0, ""), wait); err != nil || resp.Header.Get("Dispatch-Status") != "busy" {
		t.Errorf("a new dispatch while draining: %v %v, want it refused busy", err, resp)
	}
	a.finish(t, 0, (*workerkit.Request).Done)
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("stop: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("stop did not return after the last request finished")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
