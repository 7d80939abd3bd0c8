package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// The helpers every e2e file shares: policies from testdata/, the fixtures
// most tests start with, the dispatcher's /debug/queues and log, the
// streams, subscriptions that lose nothing, and subprocesses other than the
// dispatcher. Those that run workers and producers are in
// worker_helpers_test.go.

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

// startFixture starts a fixture whose dispatcher runs with the extra flags.
func startFixture(t testing.TB, extra ...string) *fixture {
	t.Helper()
	f := newFixture(t)
	f.p = startDispatcher(t, f.ns.URL(), extra...)
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

// publish publishes one request with JetStream: id as its Nats-Msg-Id,
// the headers hdr (spelled exactly as given, as a producer would send them)
// and body. The id must be new: a duplicate fails the test.
func publish(t testing.TB, js jetstream.JetStream, subject, id string, hdr map[string]string, body []byte) {
	t.Helper()
	ack, err := tryPublish(js, subject, id, hdr, body)
	if err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
	if ack.Duplicate {
		t.Fatalf("publish %s: JetStream says duplicate", id)
	}
}

// publishAll publishes msgs asynchronously and waits for JetStream to
// acknowledge every one: a backlog published at once, however slow the
// machine, so that a test's workers do not run the first requests while the
// last are still being published one round trip at a time.
func publishAll(t testing.TB, js jetstream.JetStream, msgs []*nats.Msg) {
	t.Helper()
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatalf("publish %s: %v", m.Header.Get(jetstream.MsgIDHeader), err)
		}
		futures = append(futures, f)
	}
	deadline := time.After(60 * time.Second)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %s: %v", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-deadline:
			t.Fatalf("publications not acknowledged within 60 s")
		}
	}
}

// tryPublish is publish returning JetStream's acknowledgement or its error,
// for tests that expect a refusal.
func tryPublish(js jetstream.JetStream, subject, id string, hdr map[string]string, body []byte) (*jetstream.PubAck, error) {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	for k, v := range hdr {
		m.Header[k] = []string{v} // exact spelling, as a producer would send it
	}
	m.Data = body
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return js.PublishMsg(ctx, m)
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

// buildPrograms builds each of the repository's programs named (cmd/<name>)
// into dir and returns their paths by name.
func buildPrograms(t testing.TB, dir string, names ...string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, name := range names {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bins[name], "fairdispatch/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	return bins
}
