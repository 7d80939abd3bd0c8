package workerkit_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// startPreempter is startStreamer with Config.Preempt set as given.
func startPreempter(t *testing.T, nc *nats.Conn, id string, preempt bool, run func(r *workerkit.Request)) *streamer {
	t.Helper()
	s := &streamer{run: run}
	w, err := workerkit.New(nc, workerkit.Config{ID: id, Preempt: preempt}, s, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return s
}

func sendPreempt(t *testing.T, nc *nats.Conn, worker, id string, seq uint64) {
	t.Helper()
	b, _ := wire.MarshalCancel(wire.Cancel{RequestID: id, Seq: seq, Reason: wire.CancelReasonPreempt})
	if err := nc.Publish("dispatch.cancel."+worker, b); err != nil {
		t.Fatal(err)
	}
}

// TestPreemptFromDispatcher (docs/protocol.md, Preemption): a worker that
// declares preempt says so in its load reports and hands back (-NAK, no end
// marker) a request it has written no response chunk for, with or without
// a response, its context ended with ErrPreempted; one whose response has
// a chunk, or a preempt naming another Dispatch-Seq, runs on untouched.
func TestPreemptFromDispatcher(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	var mu sync.Mutex
	var declared bool
	if _, err := nc.Subscribe("dispatch.load.w1", func(m *nats.Msg) {
		var r wire.LoadReport
		if json.Unmarshal(m.Data, &r) == nil && r.Preempt {
			mu.Lock()
			declared = true
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	startPreempter(t, nc, "w1", true, func(r *workerkit.Request) {
		if p := r.Response(); p != nil {
			if err := p.Start(context.Background()); err != nil {
				return
			}
			if r.RequestID == "chunked" {
				_ = p.Write([]byte("x"))
			}
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	natstest.Eventually(t, wait, func() bool { mu.Lock(); defer mu.Unlock(); return declared }, "a load report with preempt")
	prodA := natstest.NewProducer(t, nc, "resp.fresh", natstest.GoOK)
	prodB := natstest.NewProducer(t, nc, "resp.chunked", natstest.GoOK)
	acks := map[string]*natstest.Acks{}
	for _, id := range []string{"fresh", "chunked", "plain", "otherseq", "joined2"} {
		acks[id] = natstest.WatchAcks(t, nc, "ack."+id)
	}
	dispatchResponse(t, nc, "fresh", 1, "resp.fresh")
	dispatchResponse(t, nc, "chunked", 2, "resp.chunked")
	for i, id := range []string{"plain", "otherseq"} {
		if _, err := nc.RequestMsg(dispatchMsg(id, uint64(3+i), 0, "ack."+id), wait); err != nil {
			t.Fatal(err)
		}
	}
	// joined: delivered again to this worker while it runs (seq 6 joins seq
	// 5); the dispatcher preempts its current dispatch, seq 6.
	for i, ack := range []string{"ack.joined", "ack.joined2"} {
		if _, err := nc.RequestMsg(dispatchMsg("joined", uint64(5+i), 0, ack), wait); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, wait, func() bool { return len(prodB.Of(wire.MsgChunk)) == 1 }, "the chunk")
	natstest.Eventually(t, wait, func() bool { return len(prodA.Of(wire.MsgClaim)) == 1 }, "the claim")
	sendPreempt(t, nc, "w1", "fresh", 1)
	sendPreempt(t, nc, "w1", "chunked", 2)
	sendPreempt(t, nc, "w1", "plain", 3)
	sendPreempt(t, nc, "w1", "otherseq", 99)
	sendPreempt(t, nc, "w1", "joined", 6)
	for _, id := range []string{"fresh", "plain", "joined2"} {
		natstest.Eventually(t, wait, func() bool { return acks[id].Has("-NAK") }, "%s handed back", id)
	}
	flush(t, nc)
	for _, id := range []string{"chunked", "otherseq"} {
		if got := acks[id].Final(); len(got) != 0 {
			t.Errorf("%s: acknowledged %v, want nothing but progress: it runs on", id, got)
		}
	}
	if n := len(prodA.Of(wire.MsgEnd)); n != 0 {
		t.Errorf("%d end markers for the handed-back response, want none", n)
	}
}

// TestPreemptNotDeclared: a worker without Config.Preempt ignores a
// preempt (the dispatcher never sends it one) and says nothing of it in its
// load reports.
func TestPreemptNotDeclared(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	reports := make(chan []byte, 16)
	if _, err := nc.Subscribe("dispatch.load.w2", func(m *nats.Msg) {
		select {
		case reports <- m.Data:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := startPreempter(t, nc, "w2", false, func(r *workerkit.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	a := natstest.WatchAcks(t, nc, "ack.x")
	m := dispatchMsg("x", 1, 0, "ack.x")
	m.Subject = "dispatch.work.w2"
	if _, err := nc.RequestMsg(m, wait); err != nil {
		t.Fatal(err)
	}
	<-started
	sendPreempt(t, nc, "w2", "x", 1)
	flush(t, nc)
	if got := a.Final(); len(got) != 0 {
		t.Errorf("acknowledged %v, want nothing but progress", got)
	}
	if c := s.cause("x"); c != nil {
		t.Errorf("cause %v, want none", c)
	}
	for len(reports) > 0 {
		var r wire.LoadReport
		if err := json.Unmarshal(<-reports, &r); err == nil && r.Preempt {
			t.Error("a load report declares preempt")
		}
	}
}
