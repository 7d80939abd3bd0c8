package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// The helpers every e2e file shares: policies from testdata/, mock workers,
// load generator runs, the dispatcher's /debug/queues, subscriptions that
// lose nothing, and subprocesses other than the dispatcher.

// policy returns the policy testdata/<name>.yaml with each ${var} in it
// replaced by the value that follows var in vars (var, value, var, value,
// ...). A variable without a value fails the test.
func policy(t testing.TB, name string, vars ...any) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	if len(vars)%2 != 0 {
		t.Fatalf("policy %s: vars %v are not pairs", name, vars)
	}
	vals := map[string]string{}
	for i := 0; i < len(vars); i += 2 {
		vals[fmt.Sprint(vars[i])] = fmt.Sprint(vars[i+1])
	}
	return os.Expand(string(b), func(v string) string {
		s, ok := vals[v]
		if !ok {
			t.Fatalf("policy %s: no value for ${%s}", name, v)
		}
		return s
	})
}

// policyFile writes policy(t, name, vars...) into a temp dir and returns its
// path, for --policy-config.
func policyFile(t testing.TB, name string, vars ...any) string {
	t.Helper()
	return writePolicy(t, policy(t, name, vars...))
}

// fairPolicy is configs/policy-classes.yaml (testdata/two-classes.yaml with
// classes premium and regular) with the given quanta.
func fairPolicy(t testing.TB, premium, regular int) string {
	t.Helper()
	return policy(t, "two-classes", "first", "premium", "second", "regular", "first_quantum", premium, "second_quantum", regular)
}

// writePolicy writes a policy file into a temp dir and returns its path.
func writePolicy(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startMock starts an in-process mock worker on nc (with an ack wait of 4 s
// unless cfg sets one), stopped at the end of the test.
func startMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	return newMock(t, nc, cfg, false)
}

// startDrainingMock is startMock with the worker draining from its first
// report: live at the dispatcher but taking nothing, so that a backlog forms
// there, until w.Helper().SetDraining(false) releases it.
func startDrainingMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	return newMock(t, nc, cfg, true)
}

// release checks that the draining worker w accepted nothing, then stops its
// draining.
func release(t testing.TB, w *mockworker.Worker) {
	t.Helper()
	if got := w.Stats().Accepted; got != 0 {
		t.Fatalf("the draining worker %s accepted %d requests before the release, want 0", w.Helper().Config().ID, got)
	}
	w.Helper().SetDraining(false)
}

func newMock(t testing.TB, nc *nats.Conn, cfg mockworker.Config, draining bool) *mockworker.Worker {
	t.Helper()
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	w, err := mockworker.New(nc, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	w.Helper().SetDraining(draining) // before the first report
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// newWorker builds a worker on package workerkit with handler h, closed at
// the end of the test (handing back anything it still holds); the caller
// starts it.
func newWorker(t testing.TB, nc *nats.Conn, cfg workerkit.Config, h workerkit.Handler) *workerkit.Worker {
	t.Helper()
	w, err := workerkit.New(nc, cfg, h, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// startWorker is newWorker, started.
func startWorker(t testing.TB, nc *nats.Conn, cfg workerkit.Config, h workerkit.Handler) *workerkit.Worker {
	t.Helper()
	w := newWorker(t, nc, cfg, h)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

// holder is a worker built on package workerkit that accepts every offer and
// finishes none, as a hung engine would. Its load report counts each request
// it holds in active_requests and, when it counts prefill, its input tokens in
// active_prefill_tokens.
type holder struct {
	t       testing.TB
	prefill bool
	w       *workerkit.Worker

	mu       sync.Mutex
	load     workerkit.RankLoad
	accepted []string
}

// startHolder starts a holder on nc.
func startHolder(t testing.TB, nc *nats.Conn, cfg workerkit.Config, prefill bool) *holder {
	t.Helper()
	h := &holder{t: t, prefill: prefill}
	h.w = newWorker(t, nc, cfg, h) // before the start: Offer reads it
	if err := h.w.Start(); err != nil {
		t.Fatal(err)
	}
	return h
}

// Offer accepts r, and never calls r.Done.
func (h *holder) Offer(r *workerkit.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.accepted = append(h.accepted, r.RequestID)
	if h.prefill {
		h.load.ActivePrefillTokens += r.ISL
	}
	h.load.ActiveRequests++
	if err := h.w.SetLoad(r.DPRank, h.load); err != nil {
		h.t.Errorf("%s: %v", h.w.Config().ID, err)
	}
	return true
}

// held returns the ids of the requests accepted so far, in order.
func (h *holder) held() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.accepted)
}

// loadReport is a load report (docs/protocol.md, Load report) of worker id,
// instance <id>-r: one rank with the given active prefill tokens,
// max_num_batched_tokens 8192.
func loadReport(id string, prefill uint64, draining bool, ttl time.Duration) []byte {
	b, _ := json.Marshal(map[string]any{
		"worker_id": id, "data_parallel_size": 1, "max_num_batched_tokens": 8192, "ttl_ms": ttl.Milliseconds(),
		"draining": draining, "instance": id + "-r",
		"ranks": []map[string]any{{"dp_rank": 0, "active_prefill_tokens": prefill}},
	})
	return b
}

// reporter plays the load-reporting side of a worker that has nothing else:
// it publishes loadReport(id, prefill, false, ttl) at once and then every
// interval, until closed or the test ends. A dispatcher started at any time
// learns about the worker within its start-up grace.
type reporter struct {
	stop, done chan struct{}
	once       sync.Once
}

func startReporter(t testing.TB, nc *nats.Conn, id string, prefill uint64, ttl, interval time.Duration) *reporter {
	t.Helper()
	r := &reporter{stop: make(chan struct{}), done: make(chan struct{})}
	body := loadReport(id, prefill, false, ttl)
	go func() {
		defer close(r.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			_ = nc.Publish("dispatch.load."+id, body)
			select {
			case <-r.stop:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(r.close)
	return r
}

// close stops the reports: the worker expires at its ttl.
func (r *reporter) close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// fixture is a nats-server, a connection to it and a dispatcher: what most
// tests start with.
type fixture struct {
	ns *natsServer
	nc *nats.Conn
	js jetstream.JetStream
	p  *proc
}

// newFixture starts the nats-server and connects to it; the caller starts
// the dispatcher.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{ns: startNATS(t)}
	f.nc = connect(t, f.ns.URL())
	f.js = jsOf(t, f.nc)
	return f
}

// startBusy starts a fixture whose dispatcher runs testdata/<policy>.yaml and
// the extra flags, and whose only worker, wbusy, is its load reports: 5000
// active prefill tokens, over any class gate of threshold 0, so nothing of
// such a class is dispatched (nobody answers on wbusy's work subject). It
// waits until the dispatcher sees wbusy, and returns wbusy's reporter too.
func startBusy(t testing.TB, policy string, extra ...string) (*fixture, *reporter) {
	t.Helper()
	f := newFixture(t)
	busy := startReporter(t, f.nc, "wbusy", 5000, 10*time.Minute, 50*time.Millisecond)
	f.p = startDispatcher(t, f.ns.URL(), append([]string{"--policy-config", policyFile(t, policy)}, extra...)...)
	waitLive(t, f.p, "wbusy")
	return f, busy
}

// startWithMock starts a fixture whose dispatcher runs with the extra flags,
// and one mock worker, cfg (ID w1 when it names none), on the fixture's
// connection; it waits until the dispatcher sees the worker.
func startWithMock(t testing.TB, cfg mockworker.Config, extra ...string) (*fixture, *mockworker.Worker) {
	t.Helper()
	f := newFixture(t)
	f.p = startDispatcher(t, f.ns.URL(), extra...)
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	w := startMock(t, f.nc, cfg)
	waitLive(t, f.p, cfg.ID)
	return f, w
}

// loadRun is a run of the load generator in the background.
type loadRun struct {
	res *loadgen.Result
	err error
	end chan struct{}
}

// startLoad runs the load generator with cfg on nc in the background; at the
// end of the test a run still going is cancelled and waited for.
func startLoad(t testing.TB, nc *nats.Conn, cfg loadgen.Config) *loadRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &loadRun{end: make(chan struct{})}
	go func() {
		defer close(r.end)
		r.res, r.err = loadgen.Run(ctx, nc, cfg, zerolog.Nop())
	}()
	t.Cleanup(func() { cancel(); <-r.end })
	return r
}

// wait waits at most timeout for the run to end and returns its result; it
// fails the test if the run did not end, or ended with an error.
func (r *loadRun) wait(t testing.TB, timeout time.Duration) *loadgen.Result {
	t.Helper()
	select {
	case <-r.end:
	case <-time.After(timeout):
		t.Fatalf("loadgen did not end within %v", timeout)
	}
	if r.res == nil {
		t.Fatalf("loadgen: %v", r.err)
	}
	if r.err != nil {
		t.Fatalf("loadgen: %v (published %d, completed %d, rejected %d: %v)",
			r.err, r.res.Published, len(r.res.Completions), len(r.res.Rejected), r.res.Rejected)
	}
	return r.res
}

// runLoad runs the load generator with cfg on nc to its end (cfg.Timeout
// bounds it) and returns its result, failing the test if it failed.
func runLoad(t testing.TB, nc *nats.Conn, cfg loadgen.Config) *loadgen.Result {
	t.Helper()
	return startLoad(t, nc, cfg).wait(t, cfg.Timeout+time.Minute)
}

// defaultLoad is n unpinned requests of 512 tokens in class default, with
// ids <runID>-<i>, that must all end within 40 s.
func defaultLoad(runID string, n int) loadgen.Config {
	return loadgen.Config{Classes: []loadgen.ClassCount{{Class: "default", Count: n}}, ISL: 512, RunID: runID, Timeout: 40 * time.Second}
}

// stream returns stream name and its info, read now.
func stream(t testing.TB, js jetstream.JetStream, name string) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return s, info
}

// streamMsgs returns the number of messages in a stream.
func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	_, info := stream(t, js, name)
	return info.State.Msgs
}

// streamAll returns every message stored in a stream, in order, read with an
// ordered consumer (fast for tens of thousands of messages).
func streamAll(t testing.TB, js jetstream.JetStream, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, info := stream(t, js, name)
	if info.State.Msgs == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("stream %s: ordered consumer: %v", name, err)
	}
	var out []*jetstream.RawStreamMsg
	for uint64(len(out)) < info.State.Msgs {
		b, err := c.Fetch(int(min(info.State.Msgs-uint64(len(out)), 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("stream %s: fetch: %v", name, err)
		}
		got := 0
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			out = append(out, &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream,
				Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
			got++
		}
		if got == 0 {
			t.Fatalf("stream %s: read %d of %d messages", name, len(out), info.State.Msgs)
		}
	}
	return out
}

// consumerInfo returns the info of the dispatcher's durable consumer on
// DISPATCH_REQ.
func consumerInfo(t testing.TB, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "DISPATCH_REQ", "dispatcher")
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// queueView is the dispatcher's /debug/queues (wire.QueueView), with the
// lookups the tests make.
type queueView struct{ wire.QueueView }

// queues fetches and decodes p's /debug/queues; ok is false on any failure.
// The dispatcher refreshes the snapshot about once a second.
func (p *proc) queues() (v queueView, ok bool) {
	code, body := p.get("/debug/queues")
	if code != http.StatusOK {
		return v, false
	}
	return v, json.Unmarshal([]byte(body), &v) == nil
}

// pendingTotal is the number of queued requests over every class in v.
func (v queueView) pendingTotal() int {
	n := 0
	for _, c := range v.Classes {
		n += c.Pending
	}
	return n
}

// pending is the number of queued requests of class in v.
func (v queueView) pending(class string) int {
	for _, c := range v.Classes {
		if c.Name == class {
			return c.Pending
		}
	}
	return 0
}

// worker returns live worker id of v, or nil.
func (v queueView) worker(id string) *wire.WorkerView {
	for i := range v.Workers {
		if v.Workers[i].ID == id {
			return &v.Workers[i]
		}
	}
	return nil
}

// hasWorker reports whether worker id is live in v.
func (v queueView) hasWorker(id string) bool { return v.worker(id) != nil }

// waitLive waits until p's /debug/queues lists every worker in ids as live.
func waitLive(t testing.TB, p *proc, ids ...string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("workers %v live at the dispatcher", ids), func() bool {
		v, ok := p.queues()
		for _, id := range ids {
			ok = ok && v.hasWorker(id)
		}
		return ok
	})
}

// waitDraining waits until p lists worker id as live and draining.
func waitDraining(t testing.TB, p *proc, id string) {
	t.Helper()
	waitFor(t, 10*time.Second, "the dispatcher to see "+id+" live and draining", func() bool {
		v, ok := p.queues()
		w := v.worker(id)
		return ok && w != nil && w.Draining
	})
}

// waitQueued waits until p holds n requests queued over all its classes.
func waitQueued(t testing.TB, p *proc, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d requests queued at the dispatcher", n), func() bool {
		v, ok := p.queues()
		return ok && v.pendingTotal() == n
	})
}

// subscribe subscribes handler to subject on nc with no pending limit (a slow
// handler must not drop what it counts), flushes, so that the subscription is
// in place at the server when it returns, and unsubscribes at the end of the
// test.
func subscribe(t testing.TB, nc *nats.Conn, subject string, handler nats.MsgHandler) *nats.Subscription {
	t.Helper()
	sub, err := nc.Subscribe(subject, handler)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// onCompletion subscribes f to the completion records (docs/protocol.md,
// Completion records) published on subject, such as dispatch.done.*; a
// message that is not one fails the test.
func onCompletion(t testing.TB, nc *nats.Conn, subject string, f func(wire.Completion)) {
	t.Helper()
	subscribe(t, nc, subject, func(m *nats.Msg) {
		var c wire.Completion
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Errorf("completion record %s on %s: %v", m.Data, m.Subject, err)
			return
		}
		f(c)
	})
}

// onOutcome subscribes f to the outcomes (docs/protocol.md, Outcomes)
// published on subject; a message that is not one is ignored.
func onOutcome(t testing.TB, nc *nats.Conn, subject string, f func(wire.Outcome)) {
	t.Helper()
	subscribe(t, nc, subject, func(m *nats.Msg) {
		var o wire.Outcome
		if json.Unmarshal(m.Data, &o) == nil {
			f(o)
		}
	})
}

// startProcess starts cmd with its output collected, kills it at the end of
// the test and waits for it (logging the output's tail if the test failed),
// and returns the output and a channel that receives cmd.Wait's result.
func startProcess(t testing.TB, name string, cmd *exec.Cmd) (*natstest.Buffer, chan error) {
	t.Helper()
	out := &natstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A child that outlives cmd (make's) keeps the output open: Wait stops
	// waiting for it 5 s after cmd's exit.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(out.String(), 30))
		}
	})
	return out, done
}

// waitExit waits at most timeout for the exit of a process started by
// startProcess (done is its channel) and returns cmd.Wait's result; it fails
// the test if the process is still running.
func waitExit(t testing.TB, done <-chan error, timeout time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", what, timeout)
		return nil
	}
}

// containsAll reports whether s contains every fragment.
func containsAll(s string, fragments ...string) bool {
	for _, f := range fragments {
		if !strings.Contains(s, f) {
			return false
		}
	}
	return true
}

// logLine returns the first line of p's output containing every fragment,
// or "".
func (p *proc) logLine(fragments ...string) string {
	for _, line := range strings.Split(p.out.String(), "\n") {
		if containsAll(line, fragments...) {
			return line
		}
	}
	return ""
}
