package workerkit_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// records collects completion records.
type records struct {
	mu   sync.Mutex
	recs []wire.Completion
}

func collectRecords(t *testing.T, nc *nats.Conn) *records {
	t.Helper()
	rs := &records{}
	sub, err := nc.Subscribe("dispatch.done.*", func(m *nats.Msg) {
		var c wire.Completion
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Errorf("record %s: %v", m.Data, err)
			return
		}
		rs.mu.Lock()
		rs.recs = append(rs.recs, c)
		rs.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rs
}

// bySeq returns the records by seq.
func (rs *records) bySeq() map[uint64]wire.Completion {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := map[uint64]wire.Completion{}
	for _, c := range rs.recs {
		out[c.Seq] = c
	}
	return out
}

// TestSecondDispatchJoins: a second dispatch of a running request is
// accepted without calling Offer and adds nothing to the load; the message
// is kept alive and acknowledged on the latest delivery's subject, and the
// completion record of the execution comes with one of 0 tokens for the
// second dispatch (docs/protocol.md, A second dispatch of a request already
// running).
func TestSecondDispatchJoins(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := collectRecords(t, nc)
	reps := subscribeReports(t, nc, "dispatch.load.w1")
	first := tapAcks(t, nc, "test.ack.first", always)
	second := tapAcks(t, nc, "test.ack.second", always)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	accept(t, nc, a, "r1", 1, "test.ack.first")

	d := dispatchMsg("r1", 2, 0, "test.ack.second")
	d.Header.Set("Dispatch-Ack-Wait-Ms", "300") // keep-alive every 100 ms from now on
	resp, err := nc.RequestMsg(d, wait)
	if err != nil || resp.Header.Get("Dispatch-Status") != "" {
		t.Fatalf("second dispatch: %v %v, want accepted", err, resp)
	}
	if got := a.count(); got != 1 {
		t.Errorf("Offer called %d times, want once", got)
	}
	natstest.Eventually(t, wait, func() bool { r, _, _ := reps.last(); return r.SeenSeq == 2 }, "seen_seq 2")
	if r, _, _ := reps.last(); r.Ranks[0].ActiveRequests != 1 || r.Ranks[0].ActivePrefillTokens != 100 {
		t.Errorf("load %+v after the second dispatch, want the first request only", r.Ranks[0])
	}
	natstest.Eventually(t, wait, func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		for _, b := range second.bodies {
			if b == "+WPI" {
				return true
			}
		}
		return false
	}, "+WPI on the second delivery's subject")

	a.finish(t, 0, func(r *workerkit.Request) error {
		if err := r.Done(); err != nil {
			return err
		}
		return r.Complete(900, 7, false)
	})
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == 1 }, "the +ACK confirmed")
	if b, _ := second.got(); len(b) != 1 || b[0] != "+ACK" {
		t.Errorf("second delivery's subject got %q, want one +ACK", b)
	}
	if b, _ := first.got(); len(b) != 0 {
		t.Errorf("first delivery's subject got %q, want nothing but +WPI: one confirmed +ACK removes the message", b)
	}
	natstest.Eventually(t, wait, func() bool { return len(rs.bySeq()) == 2 }, "two completion records")
	recs := rs.bySeq()
	if c := recs[1]; c.RequestID != "r1" || c.PrefillTokens != 900 || c.OutputTokens != 7 {
		t.Errorf("record of seq 1: %+v, want what the execution computed", c)
	}
	if c := recs[2]; c.RequestID != "r1" || c.PrefillTokens != 0 || c.OutputTokens != 0 || c.Status != wire.StatusOK {
		t.Errorf("record of seq 2: %+v, want 0 tokens, ok", c)
	}
	if s := a.w.Stats(); s.Joined != 1 || s.AlreadyFinished != 0 {
		t.Errorf("stats %+v: want one joined", s)
	}
}

// TestSecondDispatchJoinsPlainAcks: with plain acknowledgements a joined
// request's +ACK goes to the subject of each of its deliveries, so that one
// lost does not leave the message.
func TestSecondDispatchJoinsPlainAcks(t *testing.T) {
	_, nc := natstest.StartServer(t)
	first := tapAcks(t, nc, "test.ack.first", always)
	second := tapAcks(t, nc, "test.ack.second", always)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", PlainAcks: true})
	accept(t, nc, a, "r1", 1, "test.ack.first")
	if resp, err := nc.RequestMsg(dispatchMsg("r1", 2, 0, "test.ack.second"), wait); err != nil || resp.Header.Get("Dispatch-Status") != "" {
		t.Fatalf("second dispatch: %v %v, want accepted", err, resp)
	}
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().Joined == 1 }, "the second dispatch joined")
	a.finish(t, 0, (*workerkit.Request).Done)
	for name, tap := range map[string]*ackTap{"first": first, "second": second} {
		natstest.Eventually(t, wait, func() bool { b, _ := tap.got(); return len(b) > 0 }, "an acknowledgement on the %s delivery's subject", name)
		if b, asked := tap.got(); len(b) != 1 || b[0] != "+ACK" || asked != 0 {
			t.Errorf("%s delivery's subject got %q (%d as requests), want one plain +ACK", name, b, asked)
		}
	}
	if s := a.w.Stats(); s.AcksPlain != 2 {
		t.Errorf("stats %+v: want two plain acknowledgements", s)
	}
}

// TestFinishedDispatchAcknowledged: a dispatch of a request finished here is
// accepted and acknowledged at once, as it was finished (+ACK; +TERM for a
// dropped one), without calling Offer, with a record of 0 tokens when the
// request had records (docs/protocol.md, A dispatch of a request already
// finished). A request handed back (-NAK) is not remembered: it runs again.
func TestFinishedDispatchAcknowledged(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := collectRecords(t, nc)
	again := tapAcks(t, nc, "test.ack.again", always)
	dropped := tapAcks(t, nc, "test.ack.dropped", always)
	tapAcks(t, nc, "test.ack.first", always)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})

	accept(t, nc, a, "done", 1, "test.ack.first")
	a.finish(t, 0, func(r *workerkit.Request) error {
		if err := r.Done(); err != nil {
			return err
		}
		return r.Complete(50, 2, false)
	})
	accept(t, nc, a, "term", 2, "test.ack.first")
	a.finish(t, 1, (*workerkit.Request).Term)
	accept(t, nc, a, "nak", 3, "test.ack.first")
	a.finish(t, 2, (*workerkit.Request).Nak)

	for _, d := range []*nats.Msg{dispatchMsg("done", 4, 0, "test.ack.again"), dispatchMsg("term", 5, 0, "test.ack.dropped")} {
		resp, err := nc.RequestMsg(d, wait)
		if err != nil || resp.Header.Get("Dispatch-Status") != "" {
			t.Fatalf("dispatch of a finished request: %v %v, want accepted", err, resp)
		}
	}
	natstest.Eventually(t, wait, func() bool { b, _ := again.got(); return len(b) == 1 }, "the +ACK of the repeated dispatch")
	natstest.Eventually(t, wait, func() bool { b, _ := dropped.got(); return len(b) == 1 }, "the +TERM of the repeated dispatch")
	if b, asked := again.got(); b[0] != "+ACK" || asked != 1 {
		t.Errorf("repeated dispatch of a done request: got %q, want a confirmed +ACK", b)
	}
	if b, _ := dropped.got(); b[0] != "+TERM" {
		t.Errorf("repeated dispatch of a dropped request: got %q, want +TERM", b)
	}
	if got := a.count(); got != 3 {
		t.Errorf("Offer called %d times, want 3 (not for the repeated dispatches)", got)
	}
	natstest.Eventually(t, wait, func() bool { _, ok := rs.bySeq()[4]; return ok }, "the record of seq 4")
	if c := rs.bySeq()[4]; c.RequestID != "done" || c.PrefillTokens != 0 || c.OutputTokens != 0 {
		t.Errorf("record of the repeated dispatch: %+v, want 0 tokens", c)
	}
	if _, ok := rs.bySeq()[5]; ok {
		t.Errorf("a record for the repeated dispatch of a request that had none")
	}

	accept(t, nc, a, "nak", 6, "test.ack.first")
	if got := a.count(); got != 4 {
		t.Errorf("Offer called %d times, want 4: a request handed back runs again", got)
	}
	if s := a.w.Stats(); s.AlreadyFinished != 2 || s.Joined != 0 || s.FinishedRemembered != 2 {
		t.Errorf("stats %+v: want 2 answered from the memory, 2 remembered", s)
	}
}
