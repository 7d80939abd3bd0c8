// Package request defines the immutable snapshot of a request that the
// scheduling core queues, orders and places (docs/design.md, Snapshot).
//
// A Snapshot is built once, when the request enters the dispatcher, and is never
// recomputed while it waits. The core packages (lanes, filters, scheduler) read it;
// only lanes writes its Index field, and only the scheduler writes Charged.
//
// The package has no behaviour beyond small accessors; it exists so that the core
// packages share one vocabulary without importing each other.
package request

// AnyRank is the Rank of a Target that pins a worker but not a data-parallel rank:
// the request goes to that worker's best rank (docs/design.md, Lanes; docs/design.md, Worker selection).
const AnyRank = -1

// Target is a pin: one worker and optionally one of its data-parallel ranks.
// The zero Target (empty Worker) means "not pinned".
type Target struct {
	Worker string
	Rank   int32 // AnyRank, or a rank in [0, 65535]
}

// Pinned reports whether t names a worker.
func (t Target) Pinned() bool { return t.Worker != "" }

// Taint is a preferred taint and its score weight (docs/design.md, Worker selection); a bare taint weighs 1.
type Taint struct {
	Name   string
	Weight float64
}

// Overlap is the number of input tokens already cached on one worker.
type Overlap struct {
	Worker string
	Tokens uint64
}

// Route holds a request's optional routing constraints. A request without any
// constraint has a nil Route, which keeps queued requests small.
type Route struct {
	Allowed   []string  // allow-list of worker ids; nil: every worker
	Required  []string  // taints the worker must carry, every one
	Preferred []Taint   // score weights
	Overlap   []Overlap // per-worker cached tokens (Dispatch-Worker-Overlap)
	// Hashes are the prompt's chained block hashes (Dispatch-Block-Hashes),
	// for the overlap with the KV cache index; nil when not sent.
	Hashes []uint64
}

// Arrival is a request entering the dispatcher, the one shape it takes on its
// way in: what its headers ask for (decoded by package ingest, strings and
// slices pointing into the message's headers, not copied) and the facts of its
// message (id, stream sequence, class token, publication time). The scheduler
// builds the queued Snapshot from it and keeps nothing else of it.
type Arrival struct {
	ID        string // the request id: Nats-Msg-Id, or "<stream>:<stream seq>"
	Ref       uint64 // the caller's handle for the message (the stream sequence)
	Token     string // the subject's class token
	Published int64  // JetStream publication time, Unix nanoseconds

	// What the headers ask for (docs/protocol.md, Request headers). Zero
	// values mean absent, unless HasDeadline says otherwise.
	ISL         uint64    // Dispatch-ISL-Tokens, tokens
	Cached      uint64    // Dispatch-Cached-Tokens, tokens (clamped to ISL by the scheduler)
	Overlap     []Overlap // Dispatch-Worker-Overlap "id=tokens,..."; nil: Dispatch-Cached-Tokens stands
	Hashes      []uint64  // Dispatch-Block-Hashes, the prompt's chained block hashes; nil when absent
	Strict      uint32    // Dispatch-Strict-Priority
	Jump        float64   // Dispatch-Priority, seconds of jump
	Pin         Target    // Dispatch-Worker and Dispatch-DP-Rank; Rank is AnyRank when no rank is given
	Allowed     []string  // Dispatch-Allowed-Workers; nil when absent
	Required    []string  // Dispatch-Required-Taints; nil when absent
	Preferred   []Taint   // Dispatch-Preferred-Taints (a bare taint weighs 1); nil when absent
	DeadlineMs  uint64    // Dispatch-Deadline-Ms, milliseconds after publication
	HasDeadline bool      // Dispatch-Deadline-Ms is present (0 is a valid deadline)
	Key         string    // Dispatch-Fairness-Key; "" for the default key "_"
}

// Snapshot is what the core knows of a request. Field sizes are chosen so that a
// queued request without constraints costs well under 256 bytes (see the lanes
// benchmark BenchmarkHeldBytes).
type Snapshot struct {
	ID string // request id: Nats-Msg-Id or "<stream>:<seq>"

	// Ref is the caller's handle for the request's message (the JetStream stream
	// sequence in the service); the core never interprets it.
	Ref uint64

	Class int // index of the physical class in the policy's class list

	// Token is the subject's class token the class was resolved from; a
	// policy change resolves it again when its class is removed
	// (docs/design.md, Live policy).
	Token string

	ISL      uint64 // raw input sequence length, tokens
	Cached   uint64 // best cached tokens, clamped to ISL
	Cost     uint64 // max(1, ISL-Cached): the DRR and WSPT cost
	Strict   uint32 // strict-priority tier, higher first
	Jump     float64
	Arrival  int64 // JetStream publication time, Unix nanoseconds
	Deadline int64 // Unix nanoseconds after which a queued request expires; 0: none
	Seq      uint64

	// Score orders requests within a strict tier, higher first (docs/design.md, Lanes). It is
	// computed once, from the class's queue policy, when the request is admitted.
	Score float64
	// Due orders a lane before the strict tier, earlier first: the effective
	// deadline in a class of queue policy edf (math.MaxInt64 for a request
	// without one), 0 in every other class (docs/design.md, Deadlines).
	Due int64

	Pin   Target
	Route *Route // nil: no allow-list, taints, overlap or block hashes

	// Key is the request's fairness key within its class (docs/protocol.md,
	// Request headers: Dispatch-Fairness-Key); "" stands for the default key "_".
	// Package lanes may rewrite it to "_overflow" when the class tracks too many keys.
	Key string

	// Charged is set once DRR has charged the request. A request handed back
	// after a refused dispatch keeps its place and is not charged again.
	Charged bool
	// Preempted counts how often the request was preempted (docs/design.md,
	// Preemption); a preempted request waits at the head of its lane.
	Preempted uint8
	// Paid is set when DRR charged the request its cost, at its first
	// arbitration. Charged without Paid is a request dispatched at arrival
	// (never arbitrated) and refused: it is queued as charged without having
	// paid, so cancelling it refunds nothing.
	Paid bool
	// BudgetPaid is set when the dispatch that made the request pay also
	// charged its key's token budget (its cost): the dispatches after a
	// refusal charge nothing, but their settlement corrects that charge.
	BudgetPaid bool
	// Refused is set when a worker refused the request (or did not answer); such
	// a request waits in its lane whatever its class's queueing (docs/protocol.md, Dispatch handshake).
	Refused bool

	// Index is the request's position in its lane heap, owned by package lanes;
	// -1 when the request is not queued.
	Index int
	// DeadlineIndex is the request's position in the scheduler's deadline heap;
	// -1 when it is not there.
	DeadlineIndex int
}

// Uncached returns the uncached input tokens: ISL minus Cached.
func (s *Snapshot) Uncached() uint64 { return s.ISL - s.Cached }

// DRRCost returns what DRR charges for the request: its cost, or 0 when it was
// already charged before a refused dispatch handed it back.
func (s *Snapshot) DRRCost() uint64 {
	if s.Charged {
		return 0
	}
	return s.Cost
}

// Allowed reports whether worker id passes the request's allow-list.
func (s *Snapshot) Allowed(id string) bool {
	if s.Route == nil || s.Route.Allowed == nil {
		return true
	}
	for _, a := range s.Route.Allowed {
		if a == id {
			return true
		}
	}
	return false
}

// Constrained reports whether the request has an allow-list or required taints,
// the constraints that make its gate check cost more than O(1) (docs/design.md, DRR).
func (s *Snapshot) Constrained() bool {
	return s.Route != nil && (s.Route.Allowed != nil || len(s.Route.Required) > 0)
}

// Before reports whether s ranks ahead of o within a class (docs/design.md, Lanes): earlier
// Due (edf classes only; 0 elsewhere), then higher strict priority, then higher score, then
// lower seq.
func (s *Snapshot) Before(o *Snapshot) bool {
	if s.Due != o.Due {
		return s.Due < o.Due
	}
	if s.Strict != o.Strict {
		return s.Strict > o.Strict
	}
	if s.Score != o.Score {
		return s.Score > o.Score
	}
	return s.Seq < o.Seq
}

// Compare orders a and b as Before does, for slices.SortFunc: -1 when a ranks
// ahead of b, 1 when b ranks ahead of a, 0 for the same request.
func Compare(a, b *Snapshot) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}
