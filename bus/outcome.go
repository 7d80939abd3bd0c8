package bus

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// PublishOutcome publishes o as JSON on subject with core NATS (fire and
// forget; docs/protocol.md, Outcomes). subject is the request's Dispatch-Reply-To value; it must
// be a literal subject (no wildcards, no empty tokens), else ErrInvalidSubject.
// Errors wrap their fault class (see Fault): ErrRequestFault for a bad
// subject or an outcome over max_payload (a huge request id), else
// ErrConnectionFault.
func PublishOutcome(nc *nats.Conn, subject string, o wire.Outcome) error {
	if !validSubject(subject) {
		return fmt.Errorf("%w: %w: outcome %s: reply subject %q", ErrRequestFault, ErrInvalidSubject, o.RequestID, subject)
	}
	data, err := wire.MarshalOutcome(o)
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	if err := nc.Publish(subject, data); err != nil {
		return fmt.Errorf("bus: outcome %s to %s: %w", o.RequestID, subject, publishFault(err))
	}
	return nil
}
