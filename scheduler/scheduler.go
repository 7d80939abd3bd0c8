package scheduler

import (
	"math/rand/v2"

	"fairdispatch/configs"
	"fairdispatch/drr"
	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/lanes"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Config configures a Scheduler.
type Config struct {
	Policy     *configs.Policy
	Thresholds filters.Thresholds
	Scoring    filters.Scoring
	// Grace is the start-up grace in nanoseconds: nothing is dispatched or
	// failed (but for expired deadlines) before it has passed since New.
	Grace int64
	// Rand breaks selection ties and samples at non-zero temperature.
	Rand *rand.Rand
	// MaxWorkers caps the live workers (0: no cap).
	MaxWorkers int
	// NoWorkersTimeout is how long, in nanoseconds, an outage (no live worker
	// after the grace) may last before the queued requests fail as
	// no_endpoints (docs/design.md, Fleet outage); 0 waits indefinitely.
	NoWorkersTimeout int64
	// MaxKeysPerClass bounds the fairness keys a class tracks at once; beyond it
	// new keys share the key _overflow (docs/design.md, Fairness keys). 0: 100000.
	MaxKeysPerClass int
	// SettleWindow is how long, in nanoseconds, a dispatch waits for its
	// completion record before it is forgotten (docs/design.md, Cost
	// settlement). 0: 10 minutes.
	SettleWindow int64
	// MaxUnsettled bounds the dispatches remembered for settlement; beyond it the
	// oldest is forgotten. 0: 1,000,000.
	MaxUnsettled int
	// KeyWindowStep is how often, in nanoseconds, the key fairness window
	// takes a new mark (docs/design.md, Key fairness window). 0: 5 s.
	KeyWindowStep int64
	// KV is the KV cache index, owned by the caller, who applies the workers'
	// events to it (docs/protocol.md, KV cache events); nil: none, and
	// Dispatch-Block-Hashes is carried but not used.
	KV *kvindex.Index
}

// Defaults of Config.
const (
	DefaultMaxKeysPerClass = 100000
	DefaultSettleWindow    = int64(10 * 60 * 1e9)
	DefaultMaxUnsettled    = 1000000
)

// Kind says what a Decision is.
type Kind uint8

// The kinds of decision.
const (
	None     Kind = iota // nothing to do
	Queued               // the request waits in its class
	Dispatch             // send the request to Worker's rank Rank with Dispatch-Seq Seq
	Reject               // dead-letter the request with Error
)

// Decision is what the scheduler decided about one request.
type Decision struct {
	Kind   Kind
	Req    *request.Snapshot
	Worker string
	Rank   int32
	Seq    uint64
	// Compact is the compact dispatch form's version the worker reads, 0 for
	// the header form (workers.Worker.Compact).
	Compact uint8
	Err     *Error
	// KVPrompt and KVOverlap, for a dispatch scored by the KV cache index:
	// the request's blocks and the longest prefix of them the chosen rank
	// holds (0 and 0 otherwise).
	KVPrompt, KVOverlap int
	// Prefill is what the dispatch booked on the chosen rank, in tokens: the
	// request's uncached tokens on that rank (docs/protocol.md, Bookings and
	// seen_seq); Req.Cost stays the arrival's DRR cost.
	Prefill uint64
	// Projected is the wait projected at admission, in nanoseconds, for a
	// request queued in a class that sheds (docs/design.md, Shedding); -1
	// when there is no projection.
	Projected int64
}

// Error is why a request was rejected.
type Error struct {
	Code    request.Code
	Message string
	// LimitKind, Current and Limit are set for queue_full: the limit kind
	// (requests, raw_isl_tokens, cached_tokens), the class total and the limit.
	LimitKind string
	Current   uint64
	Limit     uint64
	// Projected, for budget_exceeded and deadline_unreachable, is the wait
	// projected at admission, in nanoseconds.
	Projected int64
	// RetryAfter, for budget_exceeded, is how long, in nanoseconds, until
	// the same request would be admitted by its key's budget.
	RetryAfter int64
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Scheduler composes the core: admission, class queues, DRR, gates, overload
// and selection. It is deterministic for a given Rand, and not safe for
// concurrent use: one goroutine (the queue actor) owns it.
type Scheduler struct {
	pol     *configs.Policy
	classes []*lanes.Keyed
	queues  []drr.Queue
	arb     *drr.Arbiter
	reg     *workers.Registry
	gates   *filters.Gates
	sel     *filters.Selector
	dl      deadlines
	kv      *kvindex.Index
	kvOut   kvindex.Overlaps // scratch for admission's overlap

	seq      uint64
	graceEnd int64
	expired  []*workers.Worker // scratch
	// lostAt is when the last live worker expired (0: never); an outage
	// began at the later of lostAt and graceEnd.
	lostAt     int64
	outTimeout int64 // Config.NoWorkersTimeout

	settle  settlements
	maxKeys int       // Config.MaxKeysPerClass, defaulted
	keyWin  keyWindow // the key fairness window (keyfair.go)

	budgeted []int        // the classes with token budgets (budget.go)
	shed     []*shedState // per class, nil unless it sheds (edf.go)
	pre      preemptions  // preempted requests and the preemptions asked (preempt.go)
	now      int64        // the latest now of Arrive, Next or Tick, for settlements
}

// New returns a scheduler started at now (Unix nanoseconds).
func New(cfg Config, now int64) *Scheduler {
	n := len(cfg.Policy.Classes)
	s := &Scheduler{pol: cfg.Policy, reg: workers.New(), graceEnd: now + cfg.Grace, outTimeout: max(0, cfg.NoWorkersTimeout)}
	s.settle.init(cfg, s.releaseKey)
	s.keyWin.step = cfg.KeyWindowStep
	if s.keyWin.step <= 0 {
		s.keyWin.step = DefaultKeyWindowStep
	}
	maxKeys := cfg.MaxKeysPerClass
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeysPerClass
	}
	s.maxKeys = maxKeys
	s.reg.MaxWorkers = cfg.MaxWorkers
	quanta, gates := classParams(cfg.Policy)
	s.arb = drr.New(quanta)
	s.gates = filters.NewGates(s.reg, gates)
	s.sel = filters.NewSelector(cfg.Scoring, cfg.Thresholds, cfg.Rand)
	s.sel.KV, s.kv = cfg.KV, cfg.KV
	s.indexBudgets()
	s.indexShed(now, nil, nil)
	s.pre.init()
	s.classes = make([]*lanes.Keyed, n)
	s.queues = make([]drr.Queue, n)
	for k := range s.classes {
		s.classes[k] = lanes.NewKeyed(checker{s}, s.keyConfig(k))
		s.queues[k] = s.classes[k]
	}
	s.configurePreemption(nil)
	return s
}

// keyConfig is the key level's configuration of class k of the policy in
// force (docs/design.md, Fairness keys, Token budgets, Tier floors).
func (s *Scheduler) keyConfig(k int) lanes.KeyConfig {
	c := &s.pol.Classes[k]
	cfg := lanes.KeyConfig{Weights: c.KeyWeights, Default: c.DefaultKeyWeight, MaxKeys: s.maxKeys, MinShare: c.MinShare}
	budgetConfig(c, &cfg)
	if st := s.shed[k]; st != nil {
		cfg.Tally = st.tally
	}
	return cfg
}

// classParams returns the DRR quanta and the gates of p's classes, in ring order.
func classParams(p *configs.Policy) ([]uint64, []filters.Gate) {
	quanta := make([]uint64, len(p.Classes))
	gates := make([]filters.Gate, len(p.Classes))
	for k, c := range p.Classes {
		quanta[k] = c.Quantum
		gates[k] = filters.Gate{Threshold: c.PrefillBusyThreshold, Frac: c.PrefillBusyThresholdFrac, Ratio: c.BusyWorkerRatio}
	}
	return quanta, gates
}

// checker answers lanes' dispatchability question: the class is not gated for
// the request.
type checker struct{ s *Scheduler }

func (c checker) Dispatchable(r *request.Snapshot) bool {
	return !c.s.pre.holdsBack(r.Class) && !c.s.gates.GatedFor(r.Class, r)
}

// Policy returns the policy the scheduler runs.
func (s *Scheduler) Policy() *configs.Policy { return s.pol }

// Workers returns the registry, for reading.
func (s *Scheduler) Workers() *workers.Registry { return s.reg }

// InGrace reports whether the start-up grace is still running at now.
func (s *Scheduler) InGrace(now int64) bool { return now < s.graceEnd }

// Outage reports whether the fleet is out at now: the start-up grace is over
// and no worker is live (draining ones count as live). since is when the
// outage began: the later of the end of the grace and the expiry of the last
// live worker (docs/design.md, Fleet outage).
func (s *Scheduler) Outage(now int64) (since int64, out bool) {
	if s.reg.Len() > 0 || s.InGrace(now) {
		return 0, false
	}
	return max(s.graceEnd, s.lostAt), true
}

// holding reports whether requests are held for want of workers at now: the
// fleet is out and the no-workers timeout, if any, has not run out.
func (s *Scheduler) holding(now int64) bool {
	since, out := s.Outage(now)
	return out && (s.outTimeout == 0 || now-since < s.outTimeout)
}
