package wire

import (
	"fmt"
)

// Cancel is a cancellation (docs/protocol.md, Cancellation): a producer
// publishes one on <prefix>.cancel with RequestID alone; the dispatcher
// forwards one for a running request to its worker on
// <prefix>.cancel.<worker_id> with Seq and Reason set.
type Cancel struct {
	// RequestID is the request's id (its Nats-Msg-Id, or the default id);
	// required, at most MaxCancelIDLen bytes.
	RequestID string `json:"request_id"`
	// Seq is the Dispatch-Seq of the dispatch the cancellation is for, set by
	// the dispatcher; 0 (omitted) from a producer.
	Seq uint64 `json:"seq,omitempty"`
	// Reason is CancelReasonCancel or CancelReasonPreempt, set by the dispatcher; omitted from a
	// producer. A worker reads a reason it does not know as CancelReasonCancel.
	Reason string `json:"reason,omitempty"`
}

// The reasons of a cancellation the dispatcher sends a worker.
const (
	// CancelReasonCancel: a producer asked for it; the worker stops the request.
	CancelReasonCancel = "cancel"
	// CancelReasonPreempt: the dispatcher preempts the request
	// (docs/protocol.md, Preemption); a worker that declares preempt in its
	// load reports hands it back (-NAK) if it has sent no response chunk,
	// else ignores it. A worker that does not declare it is never sent one.
	CancelReasonPreempt = "preempt"
)

// MaxCancelBytes bounds a cancellation's body; MaxCancelIDLen its request id
// (a request with a longer Nats-Msg-Id cannot be cancelled by id).
const (
	MaxCancelBytes = 4096
	MaxCancelIDLen = 1024
)

// MarshalCancel returns c's JSON, without a trailing newline or HTML escaping.
func MarshalCancel(c Cancel) ([]byte, error) {
	if err := checkCancel(c); err != nil {
		return nil, err
	}
	b, err := Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("cancel %s: %w", c.RequestID, err)
	}
	return b, nil
}

// ParseCancel decodes and checks a cancellation: at most MaxCancelBytes, a
// JSON object with a request id of 1 to MaxCancelIDLen bytes. Unknown fields
// are ignored.
func ParseCancel(b []byte) (Cancel, error) {
	var c Cancel
	if err := unmarshalBounded("cancel", b, MaxCancelBytes, &c); err != nil {
		return c, err
	}
	return c, checkCancel(c)
}

func checkCancel(c Cancel) error {
	switch {
	case c.RequestID == "":
		return fmt.Errorf("cancel: request_id missing or empty")
	case len(c.RequestID) > MaxCancelIDLen:
		return fmt.Errorf("cancel: request_id of %d bytes, more than %d", len(c.RequestID), MaxCancelIDLen)
	}
	return nil
}
