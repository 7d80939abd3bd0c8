package wire

import "time"

// Completion is the record a worker publishes on <prefix>.done.<worker_id>
// when a request finishes (the mock worker and the Go helper's users do; load
// generators and tests read it). Times marshal as RFC 3339 with nanoseconds;
// StartedAt is when the request got a sequence slot.
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
	// CachedTokens is the prompt tokens the worker found in its prefix
	// cache (the mock worker with --kv-capacity); omitted when 0.
	CachedTokens uint64 `json:"cached_tokens,omitempty"`
}
