package configs

import (
	"fmt"
	"math"
)

// QueuePolicy orders requests within a class.
type QueuePolicy string

// The queue policies a class may use.
const (
	// FCFS serves the earliest publication first (after strict priority and
	// priority jump); it is the default.
	FCFS QueuePolicy = "fcfs"
	// WSPT (weighted shortest processing time) serves the highest
	// (1 + priority jump) / cost first.
	WSPT QueuePolicy = "wspt"
)

// MaxTokens bounds token counts and quanta: 2^40. It also bounds every other
// unsigned integer of the policy file (thresholds, min_tokens, limits).
const MaxTokens = 1 << 40

// Bucket is one uncached-ISL bucket: a request whose uncached token count is
// at least MinTokens, and below the next bucket's MinTokens, falls into it.
type Bucket struct {
	MinTokens uint64 // in tokens, at most MaxTokens
	Name      string // a subject token
}

// Class is one physical policy class, with defaults applied.
type Class struct {
	Name    string      // a subject token, unique in the policy
	Family  string      // "" for an explicit class
	Bucket  string      // "" for an explicit class
	Queue   QueuePolicy // default FCFS
	Quantum uint64      // DRR quantum in tokens: > 0, at most MaxTokens

	// PrefillBusyThreshold is the class gate in active prefill tokens
	// (at most MaxTokens); nil when unset.
	PrefillBusyThreshold *uint64
	// PrefillBusyThresholdFrac is the class gate as a fraction of a rank's
	// max_num_batched_tokens; nil when unset; finite, >= 0.
	PrefillBusyThresholdFrac *float64
	// BusyWorkerRatio gates the class when busy ranks >= ratio * eligible
	// ranks; nil when unset (gated only when no rank is free); in (0,1], and
	// only set together with a threshold.
	BusyWorkerRatio *float64

	RequestLimit *uint64 // request_queue_limit_per_worker, in requests; nil: no limit
	RawISLLimit  *uint64 // raw_isl_token_queue_limit_per_worker, in tokens; nil: no limit
	CachedLimit  *uint64 // cached_token_queue_limit_per_worker, in tokens; nil: no limit

	// KeyWeights maps a fairness key to its weight within the class, each in
	// [MinKeyWeight, MaxKeyWeight]; nil: every key weighs DefaultKeyWeight
	// (docs/design.md, Fairness keys).
	KeyWeights map[string]float64
	// DefaultKeyWeight is the weight of a key not in KeyWeights, in
	// [MinKeyWeight, MaxKeyWeight]; default 1.
	DefaultKeyWeight float64
	// OutputTokenWeight weighs output tokens in a completion's actual cost:
	// prefill_tokens + OutputTokenWeight * output_tokens (docs/design.md, Cost
	// settlement); in [0, MaxKeyWeight], default 0.
	OutputTokenWeight float64

	// DeadlineMs is the class's default deadline, in milliseconds after
	// publication; nil: none. With KeyDeadlinesMs and the request's own
	// Dispatch-Deadline-Ms the tightest wins (docs/design.md, Deadlines).
	DeadlineMs *uint64
	// KeyDeadlinesMs maps a fairness key to its deadline in milliseconds
	// after publication, 0 to 2^40; nil: none.
	KeyDeadlinesMs map[string]uint64
	// ShedUnreachable rejects a request at admission as deadline_unreachable
	// when its projected wait passes its deadline (docs/design.md, Shedding);
	// default false.
	ShedUnreachable bool
	// DefaultKeyBudget is the token budget of a key not in KeyBudgets; nil:
	// unlimited (docs/design.md, Token budgets).
	DefaultKeyBudget *Budget
	// KeyBudgets maps a fairness key to its budget; a nil value is a key
	// listed as unlimited.
	KeyBudgets map[string]*Budget
	// Sheddable marks a class whose running requests may be preempted
	// (docs/design.md, Preemption).
	Sheddable bool
	// MaxPreemptions bounds how often one request of a sheddable class is
	// preempted, 0 to MaxMaxPreemptions; default DefaultMaxPreemptions.
	MaxPreemptions uint32
	// PreemptAfterMs, for a class that is not sheddable, is how long its
	// request may wait, in milliseconds, before the dispatcher preempts
	// sheddable work in its way; nil: never.
	PreemptAfterMs *uint64
	// MinShare maps a strict tier to the least share, in (0, 1), of its
	// key's service it gets while backlogged (docs/design.md, Tier floors);
	// the shares add up to less than 1. nil: strict priority alone.
	MinShare map[uint32]float64
}

// Bounds of a fairness-key weight.
const (
	MinKeyWeight = 0.01
	MaxKeyWeight = 1000
)

// Queues reports whether the class queues (it has either prefill busy
// threshold set; 0 counts as set). A class that does not queue dispatches a
// request at once or fails it.
func (c Class) Queues() bool {
	return c.PrefillBusyThreshold != nil || c.PrefillBusyThresholdFrac != nil
}

// Explicit reports whether the class has no family (selected only by its name).
func (c Class) Explicit() bool { return c.Family == "" }

// Policy is a validated policy configuration. Obtain one from Parse, Load or
// Default: the resolution tables Resolve and Index use are built there. A
// Policy is immutable after construction and safe for concurrent reads.
type Policy struct {
	DefaultFamily string   // "" for the synthetic profile
	Buckets       []Bucket // nil for the synthetic profile
	Classes       []Class  // in file order: this is the DRR ring order
	// Source is the text Parse read; nil for a policy built otherwise (the
	// synthetic profile). A trace's header carries it.
	Source []byte

	// Resolution tables, built once by newPolicy.
	families []string       // family names in order of first appearance
	family   map[string]int // family name -> index in families
	explicit map[string]int // explicit class name -> index in Classes
	byName   map[string]int // class name -> index in Classes
	matrix   [][]int        // [family][bucket] -> index in Classes
	mins     []uint64       // Buckets[i].MinTokens, for the binary search
	defFam   int            // index of DefaultFamily in families
}

// newPolicy builds the resolution tables of a policy whose exported fields
// are already validated.
func newPolicy(defaultFamily string, buckets []Bucket, classes []Class) *Policy {
	p := &Policy{
		DefaultFamily: defaultFamily,
		Buckets:       buckets,
		Classes:       classes,
		family:        map[string]int{},
		explicit:      map[string]int{},
		byName:        make(map[string]int, len(classes)),
	}
	bucket := make(map[string]int, len(buckets))
	for i, b := range buckets {
		bucket[b.Name] = i
		p.mins = append(p.mins, b.MinTokens)
	}
	for i, c := range classes {
		p.byName[c.Name] = i
		if c.Explicit() {
			p.explicit[c.Name] = i
			continue
		}
		f, ok := p.family[c.Family]
		if !ok {
			f = len(p.families)
			p.family[c.Family] = f
			p.families = append(p.families, c.Family)
			row := make([]int, len(buckets))
			for j := range row {
				row[j] = -1
			}
			p.matrix = append(p.matrix, row)
		}
		p.matrix[f][bucket[c.Bucket]] = i
	}
	p.defFam = p.family[defaultFamily]
	return p
}

// Default returns the synthetic one-class profile used when no policy file is
// given: one class "default", quantum 1, the given queue policy,
// PrefillBusyThresholdFrac = queueThreshold (nil: queueing off), no limits.
// queuePolicy must be "fcfs" or "wspt" (the flag --queue-policy);
// queueThreshold, if non-nil, must be finite and >= 0 (the flag
// --queue-threshold). The threshold is copied.
func Default(queuePolicy string, queueThreshold *float64) (*Policy, error) {
	q := QueuePolicy(queuePolicy)
	if q != FCFS && q != WSPT {
		return nil, fmt.Errorf("configs: --queue-policy: must be fcfs or wspt, got %q", queuePolicy)
	}
	c := Class{Name: "default", Queue: q, Quantum: 1, DefaultKeyWeight: 1, MaxPreemptions: DefaultMaxPreemptions}
	if queueThreshold != nil {
		v := *queueThreshold
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("configs: --queue-threshold: must be finite and >= 0, got %v", v)
		}
		c.PrefillBusyThresholdFrac = &v
	}
	return newPolicy("", nil, []Class{c}), nil
}

// Resolve returns the index in Classes of the physical class for a request
// arriving on subject token token with uncached uncached tokens (docs/design.md, Class resolution):
//
//  1. token equals an explicit class's name: that class.
//  2. else token equals a family: that family; else (unknown, or the name of
//     a family × bucket class) DefaultFamily.
//  3. the bucket is the one with the largest MinTokens <= uncached; the
//     result is the family's class for that bucket.
//
// For the synthetic profile it always returns 0. Cost: two map lookups and a
// binary search over the buckets, O(log buckets); it does not allocate.
func (p *Policy) Resolve(token string, uncached uint64) int {
	if p.DefaultFamily == "" {
		return 0
	}
	if i, ok := p.explicit[token]; ok {
		return i
	}
	f, ok := p.family[token]
	if !ok {
		f = p.defFam
	}
	// Largest i with mins[i] <= uncached; mins[0] == 0, so i >= 0.
	lo, hi := 0, len(p.mins)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if p.mins[mid] <= uncached {
			lo = mid
		} else {
			hi = mid
		}
	}
	return p.matrix[f][lo]
}

// Known reports whether token names an explicit class or a policy family, that
// is whether Resolve uses it rather than falling back to DefaultFamily. Every
// token is known to the synthetic profile. Cost: two map lookups.
func (p *Policy) Known(token string) bool {
	if p.DefaultFamily == "" {
		return true
	}
	if _, ok := p.explicit[token]; ok {
		return true
	}
	_, ok := p.family[token]
	return ok
}

// Index returns the index in Classes of the class with that name, or -1.
// Cost: one map lookup.
func (p *Policy) Index(name string) int {
	if i, ok := p.byName[name]; ok {
		return i
	}
	return -1
}
