package loadgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

func logger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// startMock starts a mock worker of cfg on nc, stopped at the test's end.
func startMock(t *testing.T, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	m, err := mockworker.Start(nc, cfg, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

// toW1 routes every request to worker w1 (natstest.StartFakeDispatcher).
func toW1(string, jetstream.Msg) (string, string) { return "w1", "" }

func TestRunCompletesAndRejects(t *testing.T) {
	_, nc := natstest.StartServer(t)
	startMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, func(class string, _ jetstream.Msg) (string, string) {
		if class == "bad" {
			return "", "queue_full"
		}
		return "w1", ""
	})

	var mu sync.Mutex
	var progress []loadgen.Progress
	res, err := loadgen.Run(context.Background(), nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: 12}, {Class: "regular", Count: 12}, {Class: "bad", Count: 3}},
		ISL:     512, Timeout: 30 * time.Second, Window: 4, ProgressInterval: 10 * time.Millisecond,
		OutcomeWait: 30 * time.Second, // Run returns once every outcome is in
		OnProgress:  func(p loadgen.Progress) { mu.Lock(); progress = append(progress, p); mu.Unlock() },
	}, logger(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !res.Complete || res.Published != 27 || len(res.Completions) != 24 || len(res.Rejected) != 3 {
		t.Fatalf("result: got complete %v, published %d, %d completions, %d rejected; want true, 27, 24, 3",
			res.Complete, res.Published, len(res.Completions), len(res.Rejected))
	}
	for class, want := range map[string]loadgen.ClassStats{
		"premium": {Published: 12, Dispatched: 12, Completed: 12},
		"regular": {Published: 12, Dispatched: 12, Completed: 12},
		"bad":     {Published: 3, Rejected: 3},
	} {
		got := res.PerClass[class]
		if got.Published != want.Published || got.Dispatched != want.Dispatched ||
			got.Completed != want.Completed || got.Rejected != want.Rejected {
			t.Errorf("class %s: got %+v, want %+v", class, got, want)
		}
	}
	if got := res.PerClass["bad"].Errors["queue_full"]; got != 3 {
		t.Errorf("bad queue_full rejections: got %d, want 3", got)
	}
	seen := map[string]bool{}
	for _, c := range res.Completions {
		if seen[c.RequestID] || c.WorkerID != "w1" || c.Latency < 0 || c.PhysicalClass != c.Class {
			t.Errorf("completion: got %+v", c)
		}
		seen[c.RequestID] = true
	}
	share := res.PrefixShare(12)
	if share["premium"]+share["regular"] != 12 || share["bad"] != 0 {
		t.Errorf("prefix share of 12: got %v", share)
	}
	if res.P50 > res.P90 || res.P90 > res.P99 {
		t.Errorf("percentiles out of order: %v %v %v", res.P50, res.P90, res.P99)
	}
	mu.Lock()
	last := progress[len(progress)-1]
	mu.Unlock()
	if last.Completed["premium"] != 12 || last.Rejected != 3 || last.Published != 27 {
		t.Errorf("last progress: got %+v", last)
	}
	s := res.Summarize(12)
	if s.Completed != 24 || len(s.Classes) != 3 || s.Classes[0].Class != "premium" || s.String() == "" {
		t.Errorf("summary: got %+v", s)
	}
}

// TestRunRetriesRefusedPublications: with the request stream at its own
// limit (4 messages, discard new), JetStream refuses publications with
// "maximum messages exceeded"; loadgen counts each refusal by its reason,
// retries it with the same Nats-Msg-Id, and every request is published once
// and completes as the worker drains the stream.
func TestRunRetriesRefusedPublications(t *testing.T) {
	_, nc := natstest.StartServer(t)
	startMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 1})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	js, _ := jetstream.New(nc)
	if _, err := js.UpdateStream(context.Background(), jetstream.StreamConfig{
		Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.MemoryStorage, MaxMsgs: 4, Discard: jetstream.DiscardNew,
	}); err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Run(context.Background(), nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: 30}}, ISL: 512, Timeout: time.Minute, Window: 30,
	}, logger(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !res.Complete || res.Published != 30 || len(res.Completions) != 30 || res.PublishFailed != 0 || res.Duplicates != 0 {
		t.Fatalf("result: got complete %v, published %d, %d completions, %d failed, %d duplicates; want true, 30, 30, 0, 0",
			res.Complete, res.Published, len(res.Completions), res.PublishFailed, res.Duplicates)
	}
	if n := res.Refused[wire.RefusalMaxMsgs]; n == 0 || len(res.Refused) != 1 {
		t.Fatalf("refusals: got %v, want some %q and nothing else", res.Refused, wire.RefusalMaxMsgs)
	}
	if s := res.Summarize(30).String(); !strings.Contains(s, "publish refused by JetStream (maximum messages exceeded): ") {
		t.Errorf("summary does not print the refusals:\n%s", s)
	}
}

func TestRunCreatesStreamAndTimesOut(t *testing.T) {
	_, nc := natstest.StartServer(t)
	res, err := loadgen.Run(context.Background(), nc, loadgen.Config{
		Prefix:  "px",
		Classes: []loadgen.ClassCount{{Class: "a", Count: 3}},
		ISL:     10, Rate: 1000, Timeout: 3 * time.Second, // nothing completes: only the run time depends on it
	}, logger(t))
	if !errors.Is(err, loadgen.ErrIncomplete) {
		t.Fatalf("run without a dispatcher: got %v, want ErrIncomplete", err)
	}
	if res == nil || res.Complete || res.Published != 3 {
		t.Fatalf("result: got %+v", res)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "PX_REQ") // named after the prefix, as the dispatcher names it
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Subjects[0] != "px.req.*" || info.State.Msgs != 3 {
		t.Errorf("stream: got %+v with %d messages", info.Config, info.State.Msgs)
	}
}

func TestParseClassCount(t *testing.T) {
	for in, want := range map[string]loadgen.ClassCount{"premium:320": {Class: "premium", Count: 320}, "a-b_c:0": {Class: "a-b_c"}} {
		got, err := loadgen.ParseClassCount(in)
		if err != nil || got != want {
			t.Errorf("ParseClassCount(%q): got %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"premium", "a:-1", "a.b:3", ":3", "a:x"} {
		if _, err := loadgen.ParseClassCount(in); err == nil {
			t.Errorf("ParseClassCount(%q): got no error", in)
		}
	}
}

// TestRunWaitsForLateDispatchedOutcomes: the dispatcher's "dispatched"
// outcome and the worker's completion record travel on different subjects,
// so the record can come first. Here a fake dispatcher and worker in one
// (the test) answer every request with its record first and its outcome
// 50 ms later, the order a slow dispatcher produces: Run still counts every
// request dispatched. Without the wait (Config.OutcomeWait negative, or Run
// returning on the last record) it counts none: the run is over before the
// first outcome comes.
func TestRunWaitsForLateDispatchedOutcomes(t *testing.T) {
	const n, late = 6, 50 * time.Millisecond
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := natstest.PullConsumer(t, natstest.RequestStream(t, js, "dispatch"), 30*time.Second)
	it, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped
			}
			id, replyTo := m.Headers().Get(jetstream.MsgIDHeader), m.Headers().Get(wire.HeaderReplyTo)
			// No timings, as a worker written from the protocol sends none.
			rec, _ := json.Marshal(wire.Completion{RequestID: id, Class: "a", WorkerID: "w1", Seq: 1})
			_ = nc.Publish("dispatch.done.w1", rec)
			_ = m.Ack()
			time.AfterFunc(late, func() {
				out, _ := json.Marshal(map[string]any{"request_id": id, "status": "dispatched", "policy_class": "a", "worker_id": "w1"})
				_ = nc.Publish(replyTo, out)
			})
		}
	}()
	res, err := loadgen.Run(context.Background(), nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "a", Count: n}}, ISL: 10, Timeout: 30 * time.Second,
		OutcomeWait: 30 * time.Second, // Run returns once every outcome is in
	}, logger(t))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := res.PerClass["a"]; got.Completed != n || got.Dispatched != n {
		t.Errorf("class a: %d completed, %d dispatched; want %d and %d", got.Completed, got.Dispatched, n, n)
	}
	for _, c := range res.Completions {
		if c.FinishedAt.IsZero() || c.Latency < 0 || c.Latency > time.Minute {
			t.Errorf("a record without timings: finished %v, latency %v; want the record's arrival", c.FinishedAt, c.Latency)
		}
	}
}

// TestRunWithoutJetStreamAPI: a producer's permissions (docs/security.md)
// grant no JetStream API, so the request stream's lookup goes unanswered;
// loadgen says so and publishes anyway, rather than wait out its timeout.
func TestRunWithoutJetStreamAPI(t *testing.T) {
	defer loadgen.SetStreamLookupWait(200 * time.Millisecond)()
	ns := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "producer", Password: "p", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"dispatch.req.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "dispatch.done.>"}},
			}},
		}
	})
	connect := func(user, pass string) *nats.Conn {
		nc, err := nats.Connect(ns.URL(), nats.UserInfo(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin := connect("admin", "a")
	js, _ := jetstream.New(admin)
	natstest.RequestStream(t, js, "dispatch")
	startMock(t, admin, mockworker.Config{ID: "w1", MaxNumSeqs: 4})
	natstest.StartFakeDispatcher(t, admin, "dispatch", 30*time.Second, toW1)
	res, err := loadgen.Run(context.Background(), connect("producer", "p"), loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "a", Count: 5}}, ISL: 10, Timeout: time.Minute,
	}, logger(t))
	if err != nil || len(res.Completions) != 5 {
		t.Fatalf("run as a producer: %v, %+v; want 5 completions", err, res)
	}
}
