package workerkit_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/workerkit"
)

// TestProgressFollowsAckWaitHeader: a worker without an ack-wait setting of
// its own (the 30 s default) keeps a request alive by the ack wait its
// dispatch carries in Dispatch-Ack-Wait-Ms: held for three times a 1 s ack
// wait, it is not redelivered, while a control message nobody works on is.
func TestProgressFollowsAckWaitHeader(t *testing.T) {
	_, nc := natstest.StartServer(t)
	const ackWait = time.Second
	f := newJS(t, nc, ackWait)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	if got := a.w.Config().AckWait; got != workerkit.DefaultAckWait {
		t.Fatalf("config ack wait %v, want the default %v", got, workerkit.DefaultAckWait)
	}
	f.publish(t, 2)
	ms := f.fetch(t, 2)
	held, control := ms[0], ms[1]
	m := dispatchMsg("held", 1, 0, held.Reply())
	m.Header.Set("Dispatch-Ack-Wait-Ms", strconv.FormatInt(ackWait.Milliseconds(), 10))
	if _, err := nc.RequestMsg(m, wait); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	if got := a.held[0].AckWait; got != ackWait {
		t.Errorf("Request.AckWait = %v, want %v", got, ackWait)
	}
	a.mu.Unlock()
	end := time.Now().Add(3 * ackWait)
	redelivered := f.redeliveredUntil(t, end)
	if len(redelivered) != 1 || redelivered[0] != string(control.Data()) {
		t.Fatalf("redelivered: got %q, want only the control %q", redelivered, control.Data())
	}
	a.finish(t, 0, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { return f.msgs(t) == 0 }, "held message acked")
}

// TestAckWaitHeaderMalformed: a malformed Dispatch-Ack-Wait-Ms is reported and
// ignored (the request keeps the fallback), an absent one is not an error.
func TestAckWaitHeaderMalformed(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	for i, v := range []string{"", "abc", "-5", "2592000001"} {
		m := dispatchMsg("r"+strconv.Itoa(i), uint64(i+1), 0, "")
		if v != "" {
			m.Header.Set("Dispatch-Ack-Wait-Ms", v)
		}
		if _, err := nc.RequestMsg(m, wait); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		r := a.held[i]
		a.mu.Unlock()
		if r.AckWait != 0 || (v == "") != (len(r.HeaderErrors) == 0) {
			t.Errorf("header %q: AckWait %v, header errors %v; want 0 and an error unless absent", v, r.AckWait, r.HeaderErrors)
		}
	}
}

// TestMaxActiveRequestsReported: the capacity is in every report, and absent
// when not configured.
func TestMaxActiveRequestsReported(t *testing.T) {
	_, nc := natstest.StartServer(t)
	rs := subscribeReports(t, nc, "dispatch.load.w1")
	startWorker(t, nc, workerkit.Config{ID: "w1", MaxActiveRequests: 2})
	natstest.Eventually(t, wait, func() bool { _, _, ok := rs.last(); return ok }, "first report")
	rep, raw, _ := rs.last()
	if rep.MaxActiveRequests != 2 || string(raw["max_active_requests"]) != "2" {
		t.Errorf("max_active_requests: got %d (%s), want 2", rep.MaxActiveRequests, raw["max_active_requests"])
	}
	rs2 := subscribeReports(t, nc, "dispatch.load.w2")
	startWorker(t, nc, workerkit.Config{ID: "w2"})
	natstest.Eventually(t, wait, func() bool { _, _, ok := rs2.last(); return ok }, "first report of w2")
	if _, raw, _ := rs2.last(); raw["max_active_requests"] != nil {
		t.Errorf("max_active_requests present without a capacity: %s", raw["max_active_requests"])
	}
	if _, err := workerkit.New(nc, workerkit.Config{ID: "w3", MaxActiveRequests: 1_000_001}, workerkit.HandlerFunc(func(*workerkit.Request) bool { return true }), zerolog.Nop()); err == nil {
		t.Errorf("MaxActiveRequests 1000001: got no error, want ErrConfig")
	}
}

// TestOneIDTwoProcessesOneOffer: two helpers started under one id (two
// processes by mistake) subscribe in a queue group named after the id, so
// every dispatch reaches exactly one of them.
func TestOneIDTwoProcessesOneOffer(t *testing.T) {
	_, nc := natstest.StartServer(t)
	var offers [2]atomic.Int64
	for i := range offers {
		w, err := workerkit.New(nc, workerkit.Config{ID: "w1"}, workerkit.HandlerFunc(func(*workerkit.Request) bool {
			offers[i].Add(1)
			return true
		}), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
	}
	const n = 40
	for i := range n {
		if _, err := nc.RequestMsg(dispatchMsg("r"+strconv.Itoa(i), uint64(i+1), 0, ""), wait); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return offers[0].Load()+offers[1].Load() >= n }, "every dispatch offered")
	if got := offers[0].Load() + offers[1].Load(); got != n {
		t.Errorf("offers: %d + %d = %d, want %d (each dispatch to exactly one process)", offers[0].Load(), offers[1].Load(), got, n)
	}
}
