package dispatcher

import (
	"errors"
	"fmt"
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

func (f *fixture) excluded(t *testing.T, id string) bool {
	t.Helper()
	w := f.a.d.Scheduler.Workers().Get(id)
	if w == nil {
		t.Fatalf("worker %s not live", id)
	}
	return w.Excluded
}

func (f *fixture) letters() []bus.DeadLetter { return f.b.letters }

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
