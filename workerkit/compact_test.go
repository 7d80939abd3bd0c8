package workerkit_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// compactMsg is dispatchMsg's request in the compact form, with the
// producer's headers h.
func compactMsg(id string, seq uint64, rank int, ack string, h nats.Header) *nats.Msg {
	f := wire.AppendDispatchFields(nil, &wire.Dispatch{RequestID: id, Class: "premium", DPRank: uint32(rank),
		Seq: seq, Cost: 100, QueuedMs: 7, Ack: ack, AckWaitMs: 900})
	for k, vs := range h {
		f = wire.AppendHeaderEntry(f, k, vs)
	}
	return &nats.Msg{Subject: "dispatch.work.w1", Data: append(wire.EndHeaders(f), "body-"+id...)}
}

// TestCompactDispatchReadsAsTheHeaderForm: the helper gives the handler the
// same request from either form; in the compact form Header holds the
// producer's headers only.
func TestCompactDispatchReadsAsTheHeaderForm(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", DPStart: 2, DPSize: 2})

	producer := nats.Header{"Dispatch-ISL-Tokens": {"640"}, "Dispatch-Fairness-Key": {" acme "}, "X-Trace": {"a", "b"}}
	hm := dispatchMsg("r1", 5, 3, "$JS.ACK.x")
	hm.Header.Set("Dispatch-Queued-Ms", "7")
	hm.Header.Set("Dispatch-Ack-Wait-Ms", "900")
	for k, vs := range producer {
		hm.Header[k] = vs
	}
	for i, m := range []*nats.Msg{hm, compactMsg("r1", 5, 3, "$JS.ACK.x", producer)} {
		resp, err := nc.RequestMsg(m, wait)
		if err != nil || resp.Header.Get("Dispatch-Status") != "" {
			t.Fatalf("dispatch: %v %v, want accepted", err, resp)
		}
		if i == 0 {
			// Handed back, so that the second dispatch of r1 is run, not
			// joined to the first (dedupe.go).
			a.finish(t, 0, (*workerkit.Request).Nak)
		}
	}
	a.mu.Lock()
	held := append([]*workerkit.Request(nil), a.held...)
	a.mu.Unlock()
	if len(held) != 2 {
		t.Fatalf("held %d, want 2", len(held))
	}
	h, c := held[0], held[1]
	if h.Compact || !c.Compact {
		t.Fatalf("Compact: header form %v, compact form %v", h.Compact, c.Compact)
	}
	same := func(r *workerkit.Request) []any {
		return []any{r.RequestID, r.Class, r.DPRank, r.Seq, r.Cost, r.QueuedMs, r.ISL, r.FairnessKey, r.Ack, r.AckWait, string(r.Data), len(r.HeaderErrors)}
	}
	if !reflect.DeepEqual(same(h), same(c)) {
		t.Fatalf("the forms read differently:\nheader  %v\ncompact %v", same(h), same(c))
	}
	if want := []any{"r1", "premium", 3, uint64(5), uint64(100), uint64(7), uint64(640), "acme", "$JS.ACK.x", 900 * time.Millisecond, "body-r1", 0}; !reflect.DeepEqual(same(c), want) {
		t.Fatalf("compact request %v, want %v", same(c), want)
	}
	if !reflect.DeepEqual(c.Header, producer) {
		t.Fatalf("compact Header %v, want the producer's %v", c.Header, producer)
	}
}

// TestCompactDispatchMalformed: a header-less dispatch that is not a frame
// is refused with Dispatch-Status: malformed, without asking the handler.
func TestCompactDispatchMalformed(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	for _, data := range [][]byte{[]byte("plain body"), {1, 9, 'r'}, nil} {
		resp, err := nc.Request("dispatch.work.w1", data, wait)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("Dispatch-Status"); got != wire.StatusMalformed {
			t.Errorf("%q: status %q, want %q", data, got, wire.StatusMalformed)
		}
	}
	if a.count() != 0 {
		t.Fatalf("the handler was offered %d malformed dispatches", a.count())
	}
}

// TestHeaderFormWorker: with Config.HeaderForm the reports leave
// compact_dispatch out (the dispatcher then sends headers), and a dispatch is
// read as the header form whatever it holds.
func TestHeaderFormWorker(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	a := startWorker(t, nc, workerkit.Config{ID: "w1", HeaderForm: true})
	natstest.Eventually(t, wait, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	if _, raw, _ := rs.last(); raw["compact_dispatch"] != nil {
		t.Fatalf("a header-form worker reported compact_dispatch %s", raw["compact_dispatch"])
	}
	if _, err := nc.RequestMsg(dispatchMsg("r1", 1, 0, ""), wait); err != nil {
		t.Fatal(err)
	}
	// A compact frame still reaches it: sent before the dispatcher read this
	// process's first report, in the form a predecessor of the id asked for.
	if _, err := nc.RequestMsg(compactMsg("r2", 2, 0, "ack.r2", nil), wait); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.held) != 2 || a.held[0].Compact || a.held[0].RequestID != "r1" {
		t.Fatalf("held %d, want r1 read in the header form first", len(a.held))
	}
	if r2 := a.held[1]; !r2.Compact || r2.RequestID != "r2" || r2.Ack != "ack.r2" {
		t.Fatalf("second dispatch read as id %q ack %q compact %v, want the frame of r2 decoded", r2.RequestID, r2.Ack, r2.Compact)
	}
}
