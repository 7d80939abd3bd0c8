package dispatcher

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/wire"
)

// deliverAttempt is deliver for the nd-th delivery of the message.
func (f *fixture) deliverAttempt(seq, nd uint64, token string, hdr nats.Header) *fakeMsg {
	m := &fakeMsg{hdr: hdr, data: []byte("body"), stream: seq, nd: nd}
	d := m.delivery(token, f.now)
	f.a.admit(f.now, &d)
	f.a.drain()
	return m
}

// TestActorRedispatchAfterRedeliveryHasAttempt2: a worker accepts a request and
// dies; JetStream redelivers it after the ack wait (delivery 2) and it is
// dispatched again. The two dispatched outcomes differ by their attempt, which
// is how a consumer tells the second dispatch (docs/protocol.md, Outcomes).
func TestActorRedispatchAfterRedeliveryHasAttempt2(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.report("w2", 0)
	hdr := nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Dispatch-Reply-To": {"out.1"}, "Nats-Msg-Id": {"r1"}}
	f.deliverAttempt(1, 1, "premium", hdr)
	f.a.answer(bus.Result{Token: 1, Worker: f.b.sent[0].worker, Outcome: bus.Accepted})
	f.now = f.now.Add(30 * time.Second)
	f.deliverAttempt(1, 2, "premium", hdr)
	if len(f.b.sent) != 2 {
		t.Fatalf("sent %d, want the redelivered request dispatched again", len(f.b.sent))
	}
	f.a.answer(bus.Result{Token: 1, Worker: f.b.sent[1].worker, Outcome: bus.Accepted})
	if len(f.outcomes) != 2 {
		t.Fatalf("outcomes %+v, want two", f.outcomes)
	}
	for i, o := range f.outcomes {
		if o.RequestID != "r1" || o.Status != wire.StatusDispatched || o.Attempt != uint64(i+1) {
			t.Errorf("outcome %d: %+v, want r1 dispatched with attempt %d", i, o, i+1)
		}
	}
}

// TestActorRejectedOutcomeHasAttempt: a rejection names the delivery it ended.
func TestActorRejectedOutcomeHasAttempt(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.deliverAttempt(3, 4, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}, "Dispatch-Reply-To": {"out.3"}})
	f.a.deadLettered(dlqDone{seq: 3})
	if len(f.outcomes) != 1 || f.outcomes[0].Status != wire.StatusRejected || f.outcomes[0].Attempt != 4 {
		t.Fatalf("outcomes %+v, want one rejected with attempt 4", f.outcomes)
	}
}

// TestActorDeadLetterAckLost: the plain +ACK after a stored dead letter is
// lost (a server restart, a consumer leader change) and JetStream delivers
// the message again: it is acknowledged again, not admitted afresh, and
// neither dead-lettered nor answered a second time (docs/protocol.md, Dead
// letters). A new message, even with the same id, is admitted as usual.
func TestActorDeadLetterAckLost(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	bad := nats.Header{"Dispatch-ISL-Tokens": {"abc"}, "Dispatch-Reply-To": {"out.3"}, "Nats-Msg-Id": {"r3"}}
	first := f.deliverAttempt(3, 1, "premium", bad)
	f.a.deadLettered(dlqDone{seq: 3})
	if got := first.log(); len(got) != 1 || got[0] != "+ACK" || len(f.b.letters) != 1 || len(f.outcomes) != 1 {
		t.Fatalf("acks %v, %d letters, %d outcomes: want +ACK after one letter, one outcome", got, len(f.b.letters), len(f.outcomes))
	}
	published := f.now
	f.now = f.now.Add(30 * time.Second)
	again := &fakeMsg{hdr: bad, data: []byte("body"), stream: 3, nd: 2}
	d := again.delivery("premium", published) // the same message: stored at the same time
	f.a.admit(f.now, &d)
	f.a.drain()
	if got := again.log(); len(got) != 1 || got[0] != "+ACK" || len(f.b.letters) != 1 || len(f.outcomes) != 1 || len(f.a.held) != 0 {
		t.Fatalf("redelivery: acks %v, %d letters, %d outcomes, %d held: want +ACK again and nothing else", got, len(f.b.letters), len(f.outcomes), len(f.a.held))
	}
	f.deliverAttempt(4, 1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Nats-Msg-Id": {"r3"}})
	if len(f.b.sent) != 1 {
		t.Fatalf("sent %d: want the new message with the same id dispatched", len(f.b.sent))
	}
	// The stream made again numbers from 1 anew: a message with the old
	// sequence but stored later is another message.
	other := &fakeMsg{hdr: nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Nats-Msg-Id": {"r9"}}, data: []byte("body"), stream: 3, nd: 2}
	d = other.delivery("premium", f.now)
	f.a.admit(f.now, &d)
	f.a.drain()
	if len(f.b.sent) != 2 || len(other.log()) != 0 {
		t.Fatalf("sent %d, acks %v: want the other message with the old sequence dispatched, not acknowledged", len(f.b.sent), other.log())
	}
}
