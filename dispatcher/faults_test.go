package dispatcher

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
)

const twoClasses = `default_policy_family: premium
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
`

// failSend makes the fake bus fail every send of token with err.
func failSend(b *fakeBus, token uint64, err error) {
	b.sendErr = func(t uint64) error {
		if t == token {
			return err
		}
		return nil
	}
}

func (f *fixture) excluded(t *testing.T, id string) bool {
	t.Helper()
	w := f.a.d.Scheduler.Workers().Get(id)
	if w == nil {
		t.Fatalf("worker %s not live", id)
	}
	return w.Excluded
}

// A request whose dispatch copy is over max_payload is the request's fault:
// it is dead-lettered as bad_request without its body, the worker is not
// excluded, and the next request, of another class, still dispatches to it.
func TestActorRequestTooLargeIsDeadLetteredAndBlamesNoWorker(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.report("w1", 5000) // busy: both requests queue
	reason := "the request is 1048600 bytes with the dispatch headers (body 1048501 bytes), over the server's max_payload of 1048576 bytes"
	failSend(f.b, 1, &bus.RequestFault{Reason: reason, Err: nats.ErrMaxPayload})
	big := f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Dispatch-Reply-To": {"out.1"}, "Nats-Msg-Id": {"big"}})
	f.deliver(2, "regular", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "Nats-Msg-Id": {"ok"}})
	f.report("w1", 0)

	if len(f.b.sent) != 1 || f.b.sent[0].token != 2 {
		t.Fatalf("sent %+v, want only the ordinary request (token 2)", f.b.sent)
	}
	if f.excluded(t, "w1") {
		t.Fatal("w1 excluded for a request's fault")
	}
	if n := f.a.d.Scheduler.Workers().Get("w1").Bookings(); n != 1 {
		t.Fatalf("w1 has %d bookings, want 1 (the failed dispatch's booking released)", n)
	}
	if len(f.b.letters) != 1 {
		t.Fatalf("letters %+v, want one", f.b.letters)
	}
	l := f.b.letters[0]
	if l.Code != "bad_request" || l.Message != reason || !l.DropBody || l.Class != "premium" || l.RequestID != "big" {
		t.Fatalf("letter %+v, want bad_request for big in premium, with the reason, without its body", l)
	}
	if f.a.inFlight != 1 {
		t.Fatalf("in flight %d, want 1", f.a.inFlight)
	}
	f.a.deadLettered(dlqDone{seq: 1})
	if got := big.log(); len(got) != 1 || got[0] != "+ACK" {
		t.Fatalf("acks %v, want +ACK after the dead letter", got)
	}
	if len(f.outcomes) != 1 || f.outcomes[0].Error != "bad_request" || f.outcomes[0].Message != reason {
		t.Fatalf("outcomes %+v, want one bad_request with the reason", f.outcomes)
	}
	if f.rel.released != 1 {
		t.Fatalf("released %d, want 1", f.rel.released)
	}
}

// A header NATS cannot send is the request's fault too; its dead letter keeps
// the body (the bus leaves the header out of it).
func TestActorUnsendableHeaderIsDeadLetteredWithBody(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	failSend(f.b, 1, &bus.RequestFault{Reason: `header name "X/Y" cannot be sent over NATS`, Err: nats.ErrBadHeaderMsg})
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}, "X/Y": {"v"}})
	f.deliver(2, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if len(f.letters()) != 1 || f.b.letters[0].DropBody || !strings.Contains(f.b.letters[0].Message, "X/Y") {
		t.Fatalf("letters %+v, want one naming X/Y, with the body", f.b.letters)
	}
	if f.excluded(t, "w1") || len(f.b.sent) != 1 || f.b.sent[0].token != 2 {
		t.Fatalf("excluded %v sent %+v; want w1 not excluded and request 2 sent", f.excluded(t, "w1"), f.b.sent)
	}
}

func (f *fixture) letters() []bus.DeadLetter { return f.b.letters }

// A connection fault blames nobody: the request keeps its place, the worker
// is not excluded, and dispatching pauses until the next tick, so a send that
// keeps failing is tried once per tick, not in a loop.
func TestActorConnectionFaultRequeuesAndPauses(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	calls := 0
	f.b.sendErr = func(uint64) error { calls++; return bus.ErrNotConnected }
	m := f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	f.report("w1", 0)
	if calls != 1 || f.a.d.Scheduler.Queued(0) != 1 || f.excluded(t, "w1") || len(f.b.letters) != 0 {
		t.Fatalf("calls %d queued %d excluded %v letters %d; want 1, 1, false, 0",
			calls, f.a.d.Scheduler.Queued(0), f.excluded(t, "w1"), len(f.b.letters))
	}
	if n := f.a.d.Scheduler.Workers().Get("w1").Bookings(); n != 0 {
		t.Fatalf("w1 has %d bookings, want 0", n)
	}
	if got := m.log(); len(got) != 1 || got[0] != "+WPI" {
		t.Fatalf("acks %v, want +WPI (held again)", got)
	}
	f.b.sendErr = nil
	f.now = f.now.Add(25 * time.Millisecond)
	f.a.tick(f.now)
	f.a.drain()
	if len(f.b.sent) != 1 || f.b.sent[0].token != 1 || f.a.d.Scheduler.Queued(0) != 0 {
		t.Fatalf("after the tick: sent %+v queued %d, want request 1 sent", f.b.sent, f.a.d.Scheduler.Queued(0))
	}
}

// A worker fault (its subject cannot be published to) is handled as a refusal.
func TestActorWorkerFaultExcludes(t *testing.T) {
	f := newFixture(t, twoClasses)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	failSend(f.b, 1, fmt.Errorf("%w: %w: worker id", bus.ErrWorkerFault, bus.ErrInvalidSubject))
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"100"}})
	if !f.excluded(t, "w1") || f.a.d.Scheduler.Queued(0) != 1 {
		t.Fatalf("excluded %v queued %d, want w1 excluded and the request queued", f.excluded(t, "w1"), f.a.d.Scheduler.Queued(0))
	}
}

// A dead letter the DLQ refuses for its own sake is stored again smaller:
// without the body, then without any original header; when even that fails
// the request goes back to the stream after the ack wait (-NAK with delay),
// never at once.
func TestActorDeadLetterStepsDownThenReturnsWithDelay(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	m := f.deliver(3, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}, "Dispatch-Reply-To": {"out.3"}})
	refused := fmt.Errorf("bus: dead letter: %w: %w", bus.ErrRequestFault, nats.ErrMaxPayload)
	for i, want := range []struct{ drop, bare bool }{{false, false}, {true, false}, {true, true}} {
		if len(f.b.letters) != i+1 {
			t.Fatalf("step %d: %d letters, want %d", i, len(f.b.letters), i+1)
		}
		if l := f.b.letters[i]; l.DropBody != want.drop || l.Bare != want.bare {
			t.Fatalf("step %d: letter DropBody %v Bare %v, want %v %v", i, l.DropBody, l.Bare, want.drop, want.bare)
		}
		f.a.deadLettered(dlqDone{seq: 3, err: refused})
	}
	if got := m.log(); len(got) != 1 || got[0] != "-NAK delay" {
		t.Fatalf("acks %v, want one -NAK with delay", got)
	}
	if len(f.a.held) != 0 || f.rel.released != 1 || len(f.outcomes) != 0 {
		t.Fatalf("held %d released %d outcomes %d, want 0, 1, 0", len(f.a.held), f.rel.released, len(f.outcomes))
	}
}

// A dead letter the dead letterer refuses at once (an invalid letter, or a
// DLQ that cannot take letters) must not loop: the old code handed the
// message back for immediate redelivery, to be rejected again at once.
func TestActorDeadLetterRefusedAtOnceDoesNotSpin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		letters int
	}{
		{"request", fmt.Errorf("%w: %w: class", bus.ErrRequestFault, bus.ErrInvalidSubject), 3},
		{"connection", errors.New("bus: something else"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, policy)
			f.now = f.now.Add(time.Second)
			f.b.pubErr = tc.err
			m := f.deliver(3, "premium", nats.Header{"Dispatch-ISL-Tokens": {"abc"}})
			if got := m.log(); len(got) != 1 || got[0] != "-NAK delay" {
				t.Fatalf("acks %v, want one -NAK with delay (redelivered after the ack wait)", got)
			}
			if len(f.b.letters) != tc.letters || len(f.a.held) != 0 || f.rel.released != 1 {
				t.Fatalf("letters %d held %d released %d, want %d, 0, 1", len(f.b.letters), len(f.a.held), f.rel.released, tc.letters)
			}
		})
	}
}

// A malformed request whose subject token cannot be a DLQ subject token (a
// literal "*") is dead-lettered under "_", not refused by the bus for ever.
func TestActorUnresolvedClassWithWildcardTokenIsDeadLettered(t *testing.T) {
	f := newFixture(t, policy)
	f.now = f.now.Add(time.Second)
	f.deliver(5, "*", nats.Header{"Dispatch-ISL-Tokens": {"abc"}})
	if len(f.b.letters) != 1 || f.b.letters[0].Class != bus.UnresolvedClass {
		t.Fatalf("letters %+v, want one under %q", f.b.letters, bus.UnresolvedClass)
	}
}
