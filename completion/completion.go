// Package completion is the completion record of docs/protocol.md, Completion
// records: what a worker publishes on <prefix>.done.<worker_id> after finishing
// a request, so that the dispatcher can settle the request's cost
// (docs/design.md, Cost settlement). Both sides of the wire use this one type:
// the worker helper and the mock worker encode it, the dispatcher decodes it.
//
// The package has no behaviour beyond encoding and checking a record; it is
// safe for concurrent use.
package completion

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Status is how the request ended.
type Status string

// The statuses of a record.
const (
	OK     Status = "ok"
	Failed Status = "failed"
)

// MaxTokens bounds prefill_tokens and output_tokens: 2^40, as every token count
// of the protocol.
const MaxTokens = 1 << 40

// MaxBytes bounds a record's JSON body; a longer one is refused unparsed.
const MaxBytes = 4096

// Record is one completion record. Fields a worker adds beyond these (the mock
// worker adds timings) are ignored by Parse.
type Record struct {
	RequestID string `json:"request_id"`
	// Seq is the dispatch's Dispatch-Seq; required, > 0.
	Seq uint64 `json:"seq"`
	// Class is the dispatch's Dispatch-Class.
	Class string `json:"class"`
	// FairnessKey is the request's Dispatch-Fairness-Key; "" when it had none.
	FairnessKey string `json:"fairness_key,omitempty"`
	// PrefillTokens is the uncached input tokens actually computed.
	PrefillTokens uint64 `json:"prefill_tokens"`
	// OutputTokens is the output tokens generated.
	OutputTokens uint64 `json:"output_tokens"`
	// Status is ok or failed.
	Status Status `json:"status"`
}

// ErrInvalid is wrapped by every error of Parse.
var ErrInvalid = errors.New("invalid completion record")

// Parse decodes and checks a record: a JSON object at most MaxBytes long, seq
// > 0, token counts at most MaxTokens, status ok or failed (absent reads as ok).
func Parse(data []byte) (Record, error) {
	var r Record
	if len(data) > MaxBytes {
		return r, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(data), MaxBytes)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case r.Seq == 0:
		return r, fmt.Errorf("%w: seq missing or 0", ErrInvalid)
	case r.PrefillTokens > MaxTokens || r.OutputTokens > MaxTokens:
		return r, fmt.Errorf("%w: token count above 2^40", ErrInvalid)
	}
	switch r.Status {
	case "":
		r.Status = OK
	case OK, Failed:
	default:
		return r, fmt.Errorf("%w: status %q, want ok or failed", ErrInvalid, r.Status)
	}
	return r, nil
}
