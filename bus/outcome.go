package bus

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// Outcome statuses (docs/protocol.md, Outcomes).
const (
	StatusDispatched = wire.StatusDispatched
	StatusRejected   = wire.StatusRejected
)

// OutcomeMsg is the JSON published to a request's Dispatch-Reply-To subject
// (docs/protocol.md, Outcomes): wire.Outcome, which defines its fields.
type OutcomeMsg = wire.Outcome

// MarshalOutcome returns o's JSON (docs/protocol.md, Outcomes), without a trailing newline and
// without HTML escaping.
func MarshalOutcome(o OutcomeMsg) ([]byte, error) {
	b, err := wire.MarshalOutcome(o)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	return b, nil
}

// PublishOutcome publishes o as JSON on subject with core NATS (fire and
// forget; docs/protocol.md, Outcomes). subject is the request's Dispatch-Reply-To value; it must
// be a literal subject (no wildcards, no empty tokens), else ErrInvalidSubject.
// Errors wrap their fault class (see Fault): ErrRequestFault for a bad
// subject or an outcome over max_payload (a huge request id), else
// ErrConnectionFault.
func PublishOutcome(nc *nats.Conn, subject string, o OutcomeMsg) error {
	if !validSubject(subject) {
		return fmt.Errorf("%w: %w: outcome %s: reply subject %q", ErrRequestFault, ErrInvalidSubject, o.RequestID, subject)
	}
	data, err := MarshalOutcome(o)
	if err != nil {
		return err
	}
	if err := nc.Publish(subject, data); err != nil {
		return fmt.Errorf("bus: outcome %s to %s: %w", o.RequestID, subject, publishFault(err))
	}
	return nil
}
