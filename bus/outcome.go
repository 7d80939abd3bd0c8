package bus

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Outcome statuses (docs/protocol.md, Outcomes).
const (
	StatusDispatched = "dispatched"
	StatusRejected   = "rejected"
)

// OutcomeMsg is the JSON published to a request's Dispatch-Reply-To subject
// (docs/protocol.md, Outcomes). Fields are written in the order docs/protocol.md lists them; empty optional fields are left out.
type OutcomeMsg struct {
	// RequestID is the request id.
	RequestID string `json:"request_id"`
	// Status is StatusDispatched or StatusRejected.
	Status string `json:"status"`
	// PolicyClass is the physical class, when one was resolved.
	PolicyClass string `json:"policy_class,omitempty"`
	// WorkerID is the worker that accepted the request (dispatched only).
	WorkerID string `json:"worker_id,omitempty"`
	// DPRank is the data-parallel rank chosen (dispatched only).
	DPRank *int `json:"dp_rank,omitempty"`
	// QueuedMs is the time from publication to dispatch, in milliseconds,
	// never negative (a negative value is written as 0).
	QueuedMs *int64 `json:"queued_ms,omitempty"`
	// Error is the error code (rejected only), e.g. "queue_full".
	Error string `json:"error,omitempty"`
	// Message is the human-readable error (rejected only).
	Message string `json:"message,omitempty"`
	// Details carries the error's data, e.g. limit_kind, current, limit.
	Details map[string]any `json:"details,omitempty"`
}

// MarshalOutcome returns o's JSON (docs/protocol.md, Outcomes), without a trailing newline and
// without HTML escaping.
func MarshalOutcome(o OutcomeMsg) ([]byte, error) {
	if o.Status != StatusDispatched && o.Status != StatusRejected {
		return nil, fmt.Errorf("bus: outcome %s: unknown status %q", o.RequestID, o.Status)
	}
	if o.QueuedMs != nil && *o.QueuedMs < 0 {
		zero := int64(0)
		o.QueuedMs = &zero
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(o); err != nil {
		return nil, fmt.Errorf("bus: outcome %s: %w", o.RequestID, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
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
