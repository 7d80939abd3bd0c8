package mock_test

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

	"fairdispatch/worker"
	"fairdispatch/worker/internal/natstest"
	"fairdispatch/worker/mock"
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
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func startMock(t *testing.T, nc *nats.Conn, cfg mock.Config) *mock.Worker {
	t.Helper()
	m, err := mock.New(nc, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
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
	var mu sync.Mutex
	var recs []mock.Completion
	sub, err := nc.Subscribe("dispatch.done.*", func(m *nats.Msg) {
		var c mock.Completion
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Errorf("completion %s: %v", m.Data, err)
		}
		mu.Lock()
		recs = append(recs, c)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := startMock(t, nc, mock.Config{ID: "w1", OutputTokens: 2, DecodePerToken: time.Millisecond})
	natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
	const n = 20
	publish(t, nc, n, 512)

	natstest.Eventually(t, wait, func() bool { mu.Lock(); defer mu.Unlock(); return len(recs) == n }, "%d completions", n)
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
	mu.Lock()
	defer mu.Unlock()
	for i, c := range recs {
		if c.WorkerID != "w1" || c.Class != "premium" || c.Seq == 0 || seen[c.RequestID] {
			t.Errorf("completion %d: got %+v", i, c)
		}
		seen[c.RequestID] = true
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
	var last worker.Report
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
	m, err := mock.New(nc, mock.Config{ID: "w1", MaxNumSeqs: 1, PrefillTokensPerSec: 0.001, RefuseWhenFull: 2},
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
