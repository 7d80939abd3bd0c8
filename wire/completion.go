package wire

import "time"

// Completion is the record a worker publishes on <prefix>.done.<worker_id>
// when a request finishes (docs/protocol.md, Completion records): the Go
// helper's Request.Complete and the mock worker write it, the dispatcher reads
// it to settle the request's cost (docs/design.md, Cost settlement), load
// generators and tests read it too. Times marshal as RFC 3339 with
// nanoseconds; StartedAt is when the request got a sequence slot.
type Completion struct {
	RequestID  string    `json:"request_id"`
	Class      string    `json:"class"`
	WorkerID   string    `json:"worker_id"`
	DPRank     int       `json:"dp_rank"`
	Seq        uint64    `json:"seq"`
	QueuedMs   uint64    `json:"queued_ms"`
	ReceivedAt time.Time `json:"received_at"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`

	// FairnessKey is the request's Dispatch-Fairness-Key; "" when it had none.
	FairnessKey string `json:"fairness_key,omitempty"`
	// PrefillTokens is the uncached input tokens actually computed, at most 2^40.
	PrefillTokens uint64 `json:"prefill_tokens"`
	// OutputTokens is the output tokens generated, at most 2^40.
	OutputTokens uint64 `json:"output_tokens"`
	// Status is how the request ended: StatusOK, StatusFailed or
	// StatusCancelled ("" reads as ok).
	Status string `json:"status,omitempty"`
	// CachedTokens is the prompt tokens the worker found in its prefix
	// cache (the mock worker with --kv-capacity); omitted when 0.
	CachedTokens uint64 `json:"cached_tokens,omitempty"`
	// FirstTokenAt is when the first output token was generated (the end
	// of the request's prefill); omitted when unknown.
	FirstTokenAt time.Time `json:"first_token_at,omitzero"`
}

// The statuses of a completion record (and StatusCancelled).
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)
