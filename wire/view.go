package wire

import "time"

// The queue view: the JSON of the admin API's GET /debug/queues
// (docs/config.md, Admin HTTP API; docs/operations.md, Queues, workers and
// fairctl top). The dispatcher builds one about every second from the
// scheduler's stats and what only its queue actor knows; fairctl and the
// status page read it. Fields may be added; none is removed or renamed
// without a note in docs/decisions.md.

// QueueView is the immutable snapshot of a dispatcher's state that the admin
// API serves at /debug/queues.
type QueueView struct {
	At        time.Time `json:"at"`
	Connected bool      `json:"connected"`
	// Standby is true while the dispatcher does not hold the leader lease
	// (--leader-election): its queues are its own, empty, not the leader's.
	Standby  bool         `json:"standby,omitempty"`
	Grace    bool         `json:"startup_grace"`
	Held     int          `json:"held"`
	InFlight int          `json:"in_flight"`
	Classes  []ClassView  `json:"classes"`
	Workers  []WorkerView `json:"workers"`
	Policy   PolicyView   `json:"policy"`

	// NoLiveWorkers is true during a fleet outage (docs/design.md, Fleet
	// outage), which began at OutageSince.
	NoLiveWorkers bool       `json:"no_live_workers"`
	OutageSince   *time.Time `json:"outage_since,omitempty"`
}

// ClassView is one class in a QueueView: the scheduler's stats (whose JSON fields
// it keeps at the top level), plus what only the actor knows. The status page
// (/ui) derives service share against quantum share from Quantum and the
// cumulative DispatchedCost (docs/operations.md, The status page).
type ClassView struct {
	ClassStats
	// OldestWaitMs is how long the oldest queued request of the class
	// (waiting in a lane, not being sent) has waited since its publication, in
	// milliseconds; 0 when none is queued.
	OldestWaitMs int64 `json:"oldest_wait_ms"`
	// Dispatched counts the class's requests accepted by a worker since this
	// process started, and DispatchedCost the sum of their costs (uncached
	// input tokens, what DRR charges). Both are kept per class name, so that
	// they survive a policy change that renumbers the classes.
	Dispatched     uint64 `json:"dispatched"`
	DispatchedCost uint64 `json:"dispatched_cost"`
	// Quantum is the class's DRR quantum in the policy in force: its weight.
	Quantum uint64 `json:"quantum"`
	// DispatchRate is Dispatched's rate per second over the interval since
	// the previous View (about a second); 0 in the first View (fairctl
	// queues shows it; docs/operations.md, Queues, workers and fairctl top).
	DispatchRate float64 `json:"dispatch_rate"`
}

// ClassStats describes one class's queue, as the scheduler counts it.
type ClassStats struct {
	Name         string `json:"name"`
	Pending      int    `json:"pending_requests"`
	ISLTokens    uint64 `json:"pending_isl_tokens"`
	CachedTokens uint64 `json:"pending_cached_tokens"`
	Deficit      int64  `json:"deficit"`
	Keys         int    `json:"fairness_keys"`
	// TopKeys are the keys with the most queued requests (at most 10) (docs/design.md,
	// Fairness keys), most first.
	TopKeys []KeyStats `json:"top_keys,omitempty"`
	// KeyFairness is how fairly the keys were served over the last window; set
	// by Scheduler.KeyFairness, nil from Stats alone.
	KeyFairness  *KeyFairness `json:"key_fairness,omitempty"`
	PinnedLanes  int          `json:"pinned_lanes"`
	BlockedLanes int          `json:"blocked_lanes"`
	FreeRanks    int          `json:"free_ranks"`
	// ThrottledKeys is the number of keys waiting for their token budget
	// (docs/design.md, Token budgets); absent for a class without budgets.
	ThrottledKeys *int `json:"throttled_keys,omitempty"`
	// DrainRate is the class's measured drain rate while backlogged, in
	// cost units per second, for a class that sheds (docs/design.md,
	// Shedding); absent otherwise or while not measured yet.
	DrainRate *float64 `json:"drain_rate,omitempty"`
	// BudgetCharged is the cost units charged to the class's token budgets
	// since the class was created: at dispatch, plus settlement corrections
	// above the estimate (refunds are not subtracted); absent for a class
	// without budgets.
	BudgetCharged *float64 `json:"budget_charged,omitempty"`
	// Preempted counts the requests of the class a worker was asked to stop
	// (preemptions asked) since the class was created; absent for a class
	// that is not sheddable (docs/design.md, Preemption).
	Preempted *uint64 `json:"preempted,omitempty"`
}

// KeyFairness is how fairly a class's keys were served over the last window
// (docs/design.md, Key fairness window), counting only the keys backlogged
// throughout it.
type KeyFairness struct {
	// WindowSeconds is the window's length.
	WindowSeconds float64 `json:"window_seconds"`
	// Keys is the number of keys measured: backlogged throughout the window.
	Keys int `json:"keys"`
	// Jain is Jain's fairness index over those keys' normalized service (cost
	// served divided by weight, plus settlement corrections): (sum x)^2 / (n *
	// sum x^2), 1 when every key got exactly its weight's share, 1/n when one
	// key got everything. Absent with fewer than two keys or no service.
	Jain *float64 `json:"jain,omitempty"`
	// MaxShareOverWeight and MinShareOverWeight are the largest and least,
	// over the keys measured, of a key's share of the service divided by its
	// weight's share of the keys' weights (1: exactly its due). Absent when Jain is.
	MaxShareOverWeight *float64 `json:"max_share_over_weight,omitempty"`
	MinShareOverWeight *float64 `json:"min_share_over_weight,omitempty"`
}

// KeyStats describes one fairness key of a class.
type KeyStats struct {
	Key    string  `json:"key"`
	Queued int     `json:"queued_requests"`
	Weight float64 `json:"weight"`
	// Lead is the key's normalized service (cost served / weight, plus
	// corrections) minus the class's virtual time, in cost units: above 0 the
	// key is ahead and waits for the others, below 0 it is owed service.
	Lead float64 `json:"lead"`
	// Share is the key's part of the service its class's measured keys got
	// over the key fairness window, and WeightShare its weight's part of their
	// weights (docs/design.md, Key fairness window): equal when the key got
	// exactly its due. Absent when the key was not backlogged throughout the
	// window, or nothing could be measured; set by Scheduler.KeyFairness.
	Share       *float64 `json:"share,omitempty"`
	WeightShare *float64 `json:"weight_share,omitempty"`
	// Budget is the key's token budget and its state (docs/design.md, Token
	// budgets); absent for a key without one.
	Budget *KeyBudget `json:"budget,omitempty"`
}

// KeyBudget is a key's token budget in a KeyStats.
type KeyBudget struct {
	// TokensPerSecond and Burst are the budget, in cost units.
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           uint64  `json:"burst"`
	// Level is what the bucket holds now, in cost units; below 0 the key is
	// in debt (settlement found its requests cost more than charged).
	Level float64 `json:"level"`
	// Throttled says the key waits for its budget: it takes no turn.
	Throttled bool `json:"throttled"`
}

// WorkerView is one live worker in a QueueView.
type WorkerView struct {
	ID         string     `json:"worker_id"`
	Instance   string     `json:"instance"`
	Draining   bool       `json:"draining"`
	Excluded   bool       `json:"excluded"`
	Refusals   int        `json:"refusals"`            // refused probes in a row
	MaxActive  uint64     `json:"max_active_requests"` // per rank; 0: no capacity`
	Compact    uint8      `json:"compact_dispatch"`    // the compact form's version it is sent; 0: headers
	Overloaded bool       `json:"overloaded"`
	Bookings   int        `json:"bookings"`
	Ranks      []RankView `json:"ranks"`
}

// RankView is one rank's load: as reported, as booked since, and the sum.
type RankView struct {
	Rank            int32  `json:"dp_rank"`
	ReportedPrefill uint64 `json:"reported_prefill_tokens"`
	BookedPrefill   uint64 `json:"booked_prefill_tokens"`
	Prefill         uint64 `json:"active_prefill_tokens"`
	DecodeBlocks    uint64 `json:"active_decode_blocks"`
	KVUsedBlocks    uint64 `json:"kv_used_blocks"`
	ActiveRequests  uint64 `json:"active_requests"`
	DecodeLatch     bool   `json:"decode_latch"`
}

// PolicyView is the policy a dispatcher runs, in its View (docs/design.md,
// Live policy).
type PolicyView struct {
	// Revision is the policy bucket's revision that runs; 0 when the policy
	// is not one of the bucket's (--policy-config or the flags).
	Revision uint64 `json:"revision"`
	// Source is "bucket", "file" (--policy-config) or "flags" (the synthetic
	// one-class policy).
	Source string `json:"source"`
	// Classes are the running policy's class names, in DRR ring order.
	Classes []string `json:"classes"`
	// AppliedAt is when the running revision was applied (absent for the
	// policy a dispatcher started with).
	AppliedAt *time.Time `json:"applied_at,omitempty"`
	// Refused counts the revisions refused since start; LastRefused is the
	// latest of them.
	Refused     uint64         `json:"refused"`
	LastRefused *RefusedPolicy `json:"last_refused,omitempty"`
}

// RefusedPolicy is a revision refused as invalid.
type RefusedPolicy struct {
	Revision uint64    `json:"revision"`
	At       time.Time `json:"at"`
	Error    string    `json:"error"` // every problem, one a line, as --check-config prints them
}
