package mockworker_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

const wait = 20 * time.Second

func toW1(string, jetstream.Msg) (string, string) { return "w1", "" }

func publish(t *testing.T, nc *nats.Conn, n int, isl int) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := nats.NewMsg("dispatch.req.premium")
		m.Header.Set(jetstream.MsgIDHeader, "r"+strconv.Itoa(i))
		m.Header.Set("Dispatch-ISL-Tokens", strconv.Itoa(isl))
		m.Header.Set("Dispatch-Fairness-Key", "tenant-"+strconv.Itoa(i%3))
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func startMock(t *testing.T, nc *nats.Conn, cfg mockworker.Config) *mockworker.Worker {
	t.Helper()
	m, err := mockworker.New(nc, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	return m
}

func TestRequestsComplete(t *testing.T) {
	_, nc := natstest.StartServer(t)
	recs := collect(t, nc)
	m := startMock(t, nc, mockworker.Config{ID: "w1", OutputTokens: 2, DecodePerToken: time.Millisecond, CostFactor: 2.5})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	const n = 20
	publish(t, nc, n, 512)

	natstest.Eventually(t, wait, func() bool { return len(recs()) == n }, "%d completions", n)
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), "DISPATCH_REQ")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, "every request acknowledged")

	seen := map[string]bool{}
	for i, c := range recs() {
		if c.WorkerID != "w1" || c.Class != "premium" || c.Seq == 0 || seen[c.RequestID] {
			t.Errorf("completion %d: got %+v", i, c)
		}
		seen[c.RequestID] = true
		// The record of docs/protocol.md, Completion records, with the cost
		// mis-stated on purpose: 512 uncached tokens times 2.5.
		if c.PrefillTokens != 1280 || c.OutputTokens != 2 || c.Status != "ok" || !strings.HasPrefix(c.FairnessKey, "tenant-") {
			t.Errorf("completion %d: got record %+v, want prefill 1280, output 2, ok, a tenant key", i, c)
		}
		if c.StartedAt.Before(c.ReceivedAt) || c.FinishedAt.Before(c.StartedAt) {
			t.Errorf("completion %d: times out of order: %+v", i, c)
		}
	}
	if got := m.Stats(); got.Completed != n || got.Accepted != n {
		t.Errorf("stats: got %+v, want %d accepted and completed", got, n)
	}
}

// TestLoadReflectsQueue runs a worker so slow that nothing finishes and checks
// the report counts every request received, running or waiting.
func TestLoadReflectsQueue(t *testing.T) {
	_, nc := natstest.StartServer(t)
	var mu sync.Mutex
	var last workerkit.Report
	sub, err := nc.Subscribe("dispatch.load.w1", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if err := json.Unmarshal(m.Data, &last); err != nil {
			t.Errorf("report: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m, err := mockworker.New(nc, mockworker.Config{ID: "w1", MaxNumSeqs: 1, PrefillTokensPerSec: 0.001, RefuseWhenFull: 2},
		zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	d := natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	publish(t, nc, 4, 512)

	natstest.Eventually(t, wait, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return last.SeenSeq >= 3 && last.Ranks[0].ActiveRequests == 3
	}, "report with three requests")
	mu.Lock()
	r := last.Ranks[0]
	mu.Unlock()
	if r.ActivePrefillTokens != 3*512 || r.KVUsedBlocks != 33 {
		t.Errorf("rank load: got %+v, want 1536 prefill tokens and 33 KV blocks (one running)", r)
	}
	// The fourth would make the waiting queue longer than 2: refused.
	natstest.Eventually(t, wait, func() bool { return d.Refused() >= 1 }, "a refusal")
	if got := m.Stats().Accepted; got != 3 {
		t.Errorf("accepted: got %d, want 3", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Stop(ctx); err == nil {
		t.Errorf("stop with requests inside: got nil, want the hand-back error")
	}
}

// received is a completion record and when it arrived.
type received struct {
	mockworker.Completion
	at time.Time
}

// collect subscribes to dispatch.done.* on nc and returns a function that
// returns the records so far, in arrival order.
func collect(t *testing.T, nc *nats.Conn) func() []received {
	t.Helper()
	var mu sync.Mutex
	var recs []received
	sub, err := nc.Subscribe("dispatch.done.*", func(m *nats.Msg) {
		r := received{at: time.Now()}
		if err := json.Unmarshal(m.Data, &r.Completion); err != nil {
			t.Errorf("completion %s: %v", m.Data, err)
		}
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), recs...)
	}
}

func TestConfirmedAcksComplete(t *testing.T) {
	_, nc := natstest.StartServer(t)
	recs := collect(t, nc)
	m := startMock(t, nc, mockworker.Config{ID: "w1"})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	const n = 10
	publish(t, nc, n, 64)
	natstest.Eventually(t, wait, func() bool { return len(recs()) == n }, "%d completions", n)
	if got := m.Stats(); got.Completed != n || got.AckFailures != 0 {
		t.Errorf("stats: got %+v, want %d completed", got, n)
	}
}

// TestPreciseTimersComplete: with PreciseTimers the simulation loop yields
// through the last stretch before each event instead of sleeping. Requests
// arriving meanwhile are still taken (4 sequences, 20 requests of 2 ms, so
// most arrive while it yields), every request completes, none is reported
// before the time its record says it finished, and Stop ends the loop.
func TestPreciseTimersComplete(t *testing.T) {
	_, nc := natstest.StartServer(t)
	recs := collect(t, nc)
	m := startMock(t, nc, mockworker.Config{ID: "w1", PreciseTimers: true, PrefillTokensPerSec: 256000})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	const n = 20
	publish(t, nc, n, 512)
	natstest.Eventually(t, wait, func() bool { return len(recs()) == n }, "%d completions", n)
	for _, r := range recs() {
		if r.at.Before(r.FinishedAt) || r.FinishedAt.Sub(r.StartedAt) != 2*time.Millisecond {
			t.Errorf("%s: started %v, finished %v, reported %v: want 2ms of service, reported after it",
				r.RequestID, r.StartedAt, r.FinishedAt, r.at)
		}
	}
	if got := m.Stats(); got.Completed != n {
		t.Errorf("stats: got %+v, want %d completed", got, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestUnansweredAck: JetStream never answers the acknowledgement (the
// Dispatch-Ack subject has no responder): the worker publishes the completion
// records, retries the acks and gives up after AckWait, counting ack
// failures, without holding up the simulation. (Each ack's first attempt
// comes after its dispatch is sent: the last one is given up no sooner than
// AckWait after the last dispatch.)
func TestUnansweredAck(t *testing.T) {
	const ackWait = 300 * time.Millisecond
	_, nc := natstest.StartServer(t)
	recs := collect(t, nc)
	m := startMock(t, nc, mockworker.Config{ID: "w1", AckWait: ackWait})
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var lastSent time.Time
	for i := range 3 {
		lastSent = time.Now()
		d := nats.NewMsg("dispatch.work.w1")
		d.Header.Set(wire.HeaderRequestID, "r"+strconv.Itoa(i))
		d.Header.Set(wire.HeaderSeq, strconv.Itoa(i+1))
		d.Header.Set(wire.HeaderISLTokens, "16")
		d.Header.Set(wire.HeaderAck, "test.ack.nobody")
		if _, err := nc.RequestMsg(d, wait); err != nil {
			t.Fatal(err)
		}
	}
	// A record is published again ahead of each retry of its ack: count requests.
	natstest.Eventually(t, wait, func() bool {
		ids := map[string]bool{}
		for _, r := range recs() {
			ids[r.RequestID] = true
		}
		return len(ids) == 3
	}, "the completion records of the three requests")
	natstest.Eventually(t, wait, func() bool { return m.Stats().AckFailures == 3 }, "three ack failures")
	if d := time.Since(lastSent); d < ackWait {
		t.Errorf("three ack failures %v after the last dispatch: want no sooner than AckWait %v", d, ackWait)
	}
	if got := m.Stats(); got.Completed != 3 || got.Accepted != 3 {
		t.Errorf("stats: got %+v, want 3 accepted and completed", got)
	}
}

// TestConfirmedAcksAcrossServerRestart: requests finish while the NATS server
// restarts on its storage; every one completes exactly once (its ack is sent
// again until JetStream confirms it) and the stream empties. The records are
// watched on the worker's own connection, which re-subscribes before it
// flushes what it buffered while disconnected.
func TestConfirmedAcksAcrossServerRestart(t *testing.T) {
	ns := natstest.Start(t, nil) // restartable on the same port and storage
	nc := ns.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	const ackWait = 3 * time.Second
	c := natstest.PullConsumer(t, st, ackWait)
	recs := collect(t, nc)
	// Requests all running at once, finishing one every 10 ms over 1.2 s, so
	// that some finish just before the server goes, some while it is down
	// (their acks wait in the reconnect buffer) and some after.
	const n = 120
	m := startMock(t, nc, mockworker.Config{ID: "w1", AckWait: ackWait, MaxNumSeqs: n, DecodePerToken: time.Millisecond})
	publish(t, nc, n, 16)
	b, err := c.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	var ds []*nats.Msg
	for msg := range b.Messages() {
		d := nats.NewMsg("dispatch.work.w1")
		d.Header = msg.Headers()
		d.Header.Set(wire.HeaderRequestID, msg.Headers().Get(jetstream.MsgIDHeader))
		d.Header.Set(wire.HeaderSeq, strconv.Itoa(len(ds)+1))
		d.Header.Set(wire.HeaderAck, msg.Reply())
		d.Header.Set(wire.HeaderOutputTokens, strconv.Itoa(10*len(ds)+1))
		ds = append(ds, d)
	}
	seq := len(ds)
	for _, d := range ds {
		if _, err := nc.RequestMsg(d, wait); err != nil {
			t.Fatal(err)
		}
	}
	if seq != n {
		t.Fatalf("fetched %d of %d", seq, n)
	}
	time.Sleep(300 * time.Millisecond)
	down := time.Now()
	ns.Stop()
	time.Sleep(300 * time.Millisecond)
	ns.Restart()
	back := time.Now()

	natstest.Eventually(t, wait, func() bool { return len(recs()) >= n }, "%d completions", n)
	natstest.Eventually(t, wait, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, "every request acknowledged")
	// Nothing is redelivered after the ack wait.
	b, err = c.Fetch(1, jetstream.FetchMaxWait(ackWait+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range b.Messages() {
		t.Errorf("redelivered after its completion record: %s", msg.Headers().Get(jetstream.MsgIDHeader))
	}
	// One completion each (a record may come in identical copies: one ahead
	// of each ack attempt).
	seen := map[string]map[time.Time]bool{}
	during := 0
	for _, r := range recs() {
		if seen[r.RequestID] == nil {
			seen[r.RequestID] = map[time.Time]bool{}
		}
		if !seen[r.RequestID][r.ReceivedAt] && r.FinishedAt.After(down) && r.FinishedAt.Before(back) {
			during++
		}
		seen[r.RequestID][r.ReceivedAt] = true
	}
	t.Logf("%d requests finished while the server was down", during)
	if during == 0 {
		t.Errorf("no request finished while the server was down")
	}
	if len(seen) != n {
		t.Errorf("completed requests: got %d, want %d", len(seen), n)
	}
	for id, k := range seen {
		if len(k) != 1 {
			t.Errorf("request %s: %d distinct completion records, want 1", id, len(k))
		}
	}
	if got := m.Stats(); got.Completed != n || got.AckFailures != 0 {
		t.Errorf("stats: got %+v, want %d completed and no ack failure", got, n)
	}
}

// TestRepeatedDispatchNotRunAgain: the mock leaves dedupe to the helper. A
// second dispatch of a running request joins it (one execution, a record of
// 0 tokens for the second dispatch); a dispatch of a finished one is
// acknowledged at once (a record of 0 tokens, no execution).
func TestRepeatedDispatchNotRunAgain(t *testing.T) {
	_, nc := natstest.StartServer(t)
	recs := collect(t, nc)
	if _, err := nc.Subscribe("test.ack.*", func(m *nats.Msg) { _ = m.Respond(nil) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	m := startMock(t, nc, mockworker.Config{ID: "w1", DecodePerToken: 100 * time.Millisecond, OutputTokens: 3})
	dispatch := func(seq int) {
		d := nats.NewMsg("dispatch.work.w1")
		d.Header.Set(wire.HeaderRequestID, "r0")
		d.Header.Set(wire.HeaderSeq, strconv.Itoa(seq))
		d.Header.Set(wire.HeaderISLTokens, "16")
		d.Header.Set(wire.HeaderAck, "test.ack."+strconv.Itoa(seq))
		if resp, err := nc.RequestMsg(d, wait); err != nil || resp.Header.Get(wire.HeaderStatus) != "" {
			t.Fatalf("dispatch seq %d: %v %v, want accepted", seq, err, resp)
		}
	}
	dispatch(1)
	dispatch(2) // while it runs (two decode steps of 100 ms)
	natstest.Eventually(t, wait, func() bool { return len(recs()) == 2 }, "two records")
	dispatch(3) // finished
	natstest.Eventually(t, wait, func() bool { return len(recs()) == 3 }, "three records")
	tokens := map[uint64]uint64{}
	for _, c := range recs() {
		tokens[c.Seq] = c.OutputTokens
	}
	if tokens[1] != 3 || tokens[2] != 0 || tokens[3] != 0 {
		t.Errorf("output tokens by seq %v, want 3 for seq 1, 0 for seqs 2 and 3", tokens)
	}
	if s := m.Stats(); s.Accepted != 1 || s.Completed != 1 {
		t.Errorf("stats %+v, want one execution", s)
	}
	natstest.Eventually(t, wait, func() bool { return m.Helper().Stats().AcksConfirmed == 2 }, "two acknowledgements confirmed")
	if h := m.Helper().Stats(); h.Joined != 1 || h.AlreadyFinished != 1 {
		t.Errorf("helper stats %+v, want one joined, one already finished", h)
	}
}
