package dispatcher

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/wire"
)

func cancelBody(id string) []byte {
	b, _ := wire.MarshalCancel(wire.Cancel{RequestID: id})
	return b
}

// cancelNow hands a cancellation to the actor and applies it, as Run would.
func (f *fixture) cancelNow(id string) {
	f.a.CancelRequest(cancelBody(id))
	for _, id := range f.a.cancels.take() {
		f.a.cancel(id)
	}
}

// TestCancelQueued: a queued request leaves with +TERM cancelled and the
// cancelled outcome; the scheduler queues nothing any more.
func TestCancelQueued(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // busy: requests queue
	m := f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Nats-Msg-Id": {"q1"}, "Dispatch-Reply-To": {"out.q1"}})
	f.now = f.now.Add(40 * time.Millisecond)
	f.cancelNow("q1")
	if got := m.log(); len(got) != 1 || got[0] != "+TERM cancelled" {
		t.Fatalf("acks %v, want +TERM cancelled", got)
	}
	if f.a.d.Scheduler.Queued(0) != 0 || len(f.a.held) != 0 || len(f.a.byID) != 0 || f.rel.released != 1 {
		t.Fatalf("queued %d held %d byID %d released %d, want 0 0 0 1", f.a.d.Scheduler.Queued(0), len(f.a.held), len(f.a.byID), f.rel.released)
	}
	if len(f.outcomes) != 1 || f.outcomes[0].Status != wire.StatusCancelled || f.outcomes[0].PolicyClass != "premium" ||
		f.outcomes[0].QueuedMs == nil || *f.outcomes[0].QueuedMs != 40 {
		t.Fatalf("outcomes %+v, want one cancelled after 40 ms", f.outcomes)
	}
	if _, ok := f.a.d.Keeper.Msg(1); ok {
		t.Error("the Keeper still keeps the cancelled message alive")
	}
}

// TestCancelUnknownThenArrives: a cancellation of an id not seen is
// remembered; the request is dropped when it arrives; a standby remembers too.
func TestCancelUnknownThenArrives(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.cancelNow("early")
	m := f.deliver(2, "premium", nats.Header{"Nats-Msg-Id": {"early"}, "Dispatch-Reply-To": {"out.e"}})
	if got := m.log(); len(got) != 1 || got[0] != "+TERM cancelled" || len(f.b.sent) != 0 {
		t.Fatalf("acks %v sent %d, want +TERM cancelled and nothing sent", got, len(f.b.sent))
	}
	if len(f.outcomes) != 1 || f.outcomes[0].Status != wire.StatusCancelled || f.rel.released != 1 || len(f.a.held) != 0 {
		t.Fatalf("outcomes %+v released %d held %d", f.outcomes, f.rel.released, len(f.a.held))
	}

	f.a.SetLeader(false)
	f.cancelNow("late")
	f.a.SetLeader(true)
	m = f.deliver(3, "premium", nats.Header{"Nats-Msg-Id": {"late"}})
	if got := m.log(); len(got) != 1 || got[0] != "+TERM cancelled" {
		t.Fatalf("a standby's remembered cancellation: acks %v", got)
	}
}

// TestCancelRunningAndSending: a running request's cancellation goes to its
// worker; one cancelled during the handshake goes there once accepted, and
// is taken out when refused.
func TestCancelRunningAndSending(t *testing.T) {
	f := newFixture(t, policy)
	var fwd []string
	f.a.d.CancelWorker = func(w string, c wire.Cancel) error {
		fwd = append(fwd, w+":"+c.RequestID+":"+strconv.FormatUint(c.Seq, 10)+":"+c.Reason)
		return nil
	}
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.deliver(1, "premium", nats.Header{"Nats-Msg-Id": {"run"}, "Dispatch-ISL-Tokens": {"10"}})
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Accepted})
	f.cancelNow("run")
	if len(fwd) != 1 || fwd[0] != "w1:run:1:cancel" {
		t.Fatalf("forwarded %v, want w1:run:1:cancel", fwd)
	}

	f.deliver(2, "premium", nats.Header{"Nats-Msg-Id": {"hs"}, "Dispatch-ISL-Tokens": {"10"}})
	f.cancelNow("hs") // in the handshake
	if len(fwd) != 1 {
		t.Fatalf("forwarded %v before the answer", fwd)
	}
	f.a.answer(bus.Result{Token: 2, Worker: "w1", Outcome: bus.Accepted})
	if len(fwd) != 2 || fwd[1] != "w1:hs:2:cancel" {
		t.Fatalf("forwarded %v, want w1:hs:2:cancel after the acceptance", fwd)
	}

	m := f.deliver(3, "premium", nats.Header{"Nats-Msg-Id": {"ref"}, "Dispatch-ISL-Tokens": {"10"}, "Dispatch-Reply-To": {"out.r"}})
	f.cancelNow("ref")
	f.a.answer(bus.Result{Token: 3, Worker: "w1", Outcome: bus.Refused})
	if got := m.log(); len(got) != 2 || got[1] != "+TERM cancelled" || f.a.d.Scheduler.Queued(0) != 0 || len(f.a.held) != 0 {
		t.Fatalf("refused after a cancel: acks %v queued %d held %d, want +WPI, +TERM cancelled, nothing held", got, f.a.d.Scheduler.Queued(0), len(f.a.held))
	}
	if o := f.outcomes[len(f.outcomes)-1]; o.RequestID != "ref" || o.Status != wire.StatusCancelled {
		t.Fatalf("last outcome %+v, want ref cancelled", o)
	}
}

// TestCancelInHandshakeRefusedAfterTheLeadIsLost: a request cancelled during
// its handshake and refused after the lead was lost (or at shutdown) is
// dropped as cancelled, not handed back, where the next leader, or this
// dispatcher restarted, might no longer remember the cancellation and run it.
func TestCancelInHandshakeRefusedAfterTheLeadIsLost(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	m := f.deliver(1, "premium", nats.Header{"Nats-Msg-Id": {"lost"}, "Dispatch-ISL-Tokens": {"10"}, "Dispatch-Reply-To": {"out.l"}})
	if h := f.a.held[1]; h == nil || !h.inFlight {
		t.Fatal("the request is not in its handshake")
	}
	f.cancelNow("lost")
	f.a.SetLeader(false)
	f.a.answer(bus.Result{Token: 1, Worker: "w1", Outcome: bus.Refused})
	if got := m.log(); len(got) != 1 || got[0] != "+TERM cancelled" || len(f.a.held) != 0 {
		t.Fatalf("refused after a cancel, not leading: acks %v held %d, want +TERM cancelled, nothing held", got, len(f.a.held))
	}
	if o := f.outcomes[len(f.outcomes)-1]; o.RequestID != "lost" || o.Status != wire.StatusCancelled {
		t.Fatalf("last outcome %+v, want lost cancelled", o)
	}
}

// TestCancelInvalidDropped: a cancellation that does not parse changes nothing.
func TestCancelInvalidDropped(t *testing.T) {
	f := newFixture(t, policy)
	for _, b := range []string{"", "{}", `{"request_id":""}`, "nope"} {
		f.a.CancelRequest([]byte(b))
	}
	if n := f.a.cancels.len(); n != 0 {
		t.Fatalf("%d cancellations queued, want 0", n)
	}
}

// TestMemoBounds: the memo forgets by age and by count, oldest first, and a
// put of an id again renews it.
func TestMemoBounds(t *testing.T) {
	m := newMemo[int](3, 100)
	m.put(0, "a", 1)
	m.put(10, "b", 2)
	m.put(20, "c", 3)
	m.put(30, "a", 4) // renews a
	m.put(40, "d", 5) // over the count: b, the oldest, goes
	if _, ok := m.get("b"); ok {
		t.Error("b kept beyond the count")
	}
	if v, ok := m.get("a"); !ok || v != 4 {
		t.Errorf("a = %d, %v; want 4", v, ok)
	}
	m.expire(125) // c (20) is older than 100
	if _, ok := m.get("c"); ok {
		t.Error("c kept beyond its age")
	}
	if m.len() != 2 {
		t.Errorf("len %d, want 2 (a, d)", m.len())
	}
	m.del("a")
	m.expire(10_000)
	if m.len() != 0 || m.fifo.Len() != 0 {
		t.Errorf("after expiry: len %d fifo %d, want empty", m.len(), m.fifo.Len())
	}
	for i := range 10_000 { // the FIFO stays bounded with one id put over and over
		m.put(int64(20_000+i), "same", i)
	}
	if m.fifo.Len() > 6 {
		t.Errorf("fifo of %d for one id", m.fifo.Len())
	}
}
