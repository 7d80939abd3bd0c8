package wire

import (
	"fmt"
)

// Outcome statuses (docs/protocol.md, Outcomes); a cancelled request's
// outcome has StatusCancelled.
const (
	StatusDispatched = "dispatched"
	StatusRejected   = "rejected"
)

// Outcome is the JSON published to a request's Dispatch-Reply-To subject
// (docs/protocol.md, Outcomes). Fields are written in the order
// docs/protocol.md lists them; empty optional fields are left out.
type Outcome struct {
	// RequestID is the request id.
	RequestID string `json:"request_id"`
	// Status is StatusDispatched, StatusRejected or StatusCancelled.
	Status string `json:"status"`
	// PolicyClass is the physical class, when one was resolved.
	PolicyClass string `json:"policy_class,omitempty"`
	// WorkerID is the worker that accepted the request (dispatched only).
	WorkerID string `json:"worker_id,omitempty"`
	// DPRank is the data-parallel rank chosen (dispatched only).
	DPRank *int `json:"dp_rank,omitempty"`
	// QueuedMs is the time from publication to dispatch (to cancellation for
	// a cancelled request), in milliseconds, never negative (a negative value
	// is written as 0).
	QueuedMs *int64 `json:"queued_ms,omitempty"`
	// Attempt is the JetStream delivery count of the request message the
	// outcome is about (1 on the first delivery); 0 when unknown, and then left
	// out. A second dispatched outcome for the same request after a redelivery
	// has a higher attempt (docs/protocol.md, Outcomes).
	Attempt uint64 `json:"attempt,omitempty"`
	// PolicyRevision is the policy bucket's revision the request was
	// dispatched under (dispatched only; docs/design.md, Live policy); 0 when
	// the dispatcher runs a policy not from the bucket, and then left out.
	PolicyRevision uint64 `json:"policy_revision,omitempty"`
	// Error is the error code (rejected only), e.g. "queue_full".
	Error string `json:"error,omitempty"`
	// Message is the human-readable error (rejected only).
	Message string `json:"message,omitempty"`
	// Details carries the error's data, e.g. limit_kind, current, limit.
	Details map[string]any `json:"details,omitempty"`
}

// MarshalOutcome returns o's JSON (docs/protocol.md, Outcomes), without a
// trailing newline and without HTML escaping. It refuses an unknown status.
func MarshalOutcome(o Outcome) ([]byte, error) {
	if o.Status != StatusDispatched && o.Status != StatusRejected && o.Status != StatusCancelled {
		return nil, fmt.Errorf("outcome %s: unknown status %q", o.RequestID, o.Status)
	}
	if o.QueuedMs != nil && *o.QueuedMs < 0 {
		zero := int64(0)
		o.QueuedMs = &zero
	}
	b, err := Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("outcome %s: %w", o.RequestID, err)
	}
	return b, nil
}
