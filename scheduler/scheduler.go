package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"fairdispatch/configs"
	"fairdispatch/drr"
	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/lanes"
	"fairdispatch/request"
	"fairdispatch/wire"
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

// Arrive admits a request (docs/design.md, Admission): it takes the snapshot, resolves the class,
// and queues it, dispatches it, or rejects it. During the start-up grace every
// request is queued, without limit checks, to be arbitrated once it is over.
// During a fleet outage every request is queued without limit checks (but
// for an expired deadline); once the outage has lasted the no-workers
// timeout, every request fails as no_endpoints (docs/design.md, Fleet outage).
func (s *Scheduler) Arrive(now int64, a *request.Arrival) Decision {
	s.now = max(s.now, now)
	r := s.snapshot(a)
	cls, cfg := s.classes[r.Class], &s.pol.Classes[r.Class]
	if s.InGrace(now) {
		s.enqueue(r)
		return Decision{Kind: Queued, Req: r}
	}
	if s.reg.Len() == 0 {
		if !s.holding(now) {
			return Decision{Kind: Reject, Req: r, Err: s.outageError(now)}
		}
		if r.Deadline != 0 && r.Deadline <= now {
			return s.expire(now, r)
		}
		s.enqueue(r)
		return Decision{Kind: Queued, Req: r}
	}
	if !cfg.Queues() || (cls.Empty() && !s.pre.holdsBack(r.Class) && !s.gates.GatedFor(r.Class, r)) {
		d := s.place(now, r)
		if d.Kind == Dispatch {
			s.settle.record(now, d, 0, false) // not arbitrated: nothing charged to correct
		}
		return d
	}
	if r.Preempted > 0 {
		// Handed back by a preemption: admitted before, it waits again
		// at the head of its lane, without a limit, budget or shedding
		// check (docs/design.md, Preemption).
		if r.Deadline != 0 && r.Deadline <= now {
			return s.expire(now, r)
		}
		s.enqueue(r)
		return Decision{Kind: Queued, Req: r, Projected: -1}
	}
	if err := s.checkLimits(r.Class); err != nil {
		return Decision{Kind: Reject, Req: r, Err: err}
	}
	if r.Deadline != 0 && r.Deadline <= now {
		return s.expire(now, r)
	}
	if s.budgeted != nil {
		if err := s.checkBudget(now, r); err != nil {
			return Decision{Kind: Reject, Req: r, Err: err}
		}
	}
	projected := int64(-1)
	if s.shed[r.Class] != nil {
		var err *Error
		if projected, err = s.checkShed(now, r); err != nil {
			return Decision{Kind: Reject, Req: r, Err: err, Projected: projected}
		}
	}
	s.enqueue(r)
	return Decision{Kind: Queued, Req: r, Projected: projected}
}

// snapshot builds the immutable snapshot of docs/design.md, Snapshot.
func (s *Scheduler) snapshot(a *request.Arrival) *request.Snapshot {
	s.seq++
	r := &request.Snapshot{
		ID: a.ID, Ref: a.Ref, Token: a.Token, ISL: a.ISL, Strict: a.Strict, Jump: a.Jump,
		Arrival: a.Published, Seq: s.seq, Pin: a.Pin, Index: -1, DeadlineIndex: -1, Key: a.Key,
	}
	if r.Key == "" {
		r.Key = lanes.DefaultKey
	}
	if a.HasDeadline {
		r.Deadline = a.Published + int64(a.DeadlineMs)*1e6
	}
	if a.Allowed != nil || a.Required != nil || a.Preferred != nil || a.Overlap != nil || a.Hashes != nil {
		rt := &request.Route{Allowed: a.Allowed, Required: a.Required, Preferred: a.Preferred, Overlap: a.Overlap, Hashes: a.Hashes}
		if rt.Allowed != nil {
			rt.Allowed = slices.Compact(slices.Sorted(slices.Values(rt.Allowed)))
		}
		r.Route = rt
	}
	r.Cached = min(s.bestCached(a, r), r.ISL)
	r.Cost = max(1, r.ISL-r.Cached)
	r.Class = s.pol.Resolve(a.Token, r.ISL-r.Cached)
	s.applyDeadlines(r, a.Published)
	s.readmit(r)
	s.order(r)
	return r
}

// score is r's order within a class of queue policy q (docs/design.md, Lanes).
func score(q configs.QueuePolicy, r *request.Snapshot) float64 {
	if q == configs.WSPT {
		return (1 + r.Jump) / float64(r.Cost)
	}
	return r.Jump - float64(r.Arrival)/1e9
}

// bestCached is the pinned worker's overlap when pinned, else the largest
// overlap among live workers passing the allow-list and taints, or
// Dispatch-Cached-Tokens when no per-worker overlap is given.
func (s *Scheduler) bestCached(a *request.Arrival, r *request.Snapshot) uint64 {
	if s.kv != nil && a.Hashes != nil {
		return s.kvCached(a, r)
	}
	if a.Overlap == nil {
		return a.Cached
	}
	var best uint64
	for _, o := range a.Overlap {
		if r.Pin.Pinned() {
			if o.Worker == r.Pin.Worker {
				return o.Tokens
			}
			continue
		}
		if w := s.reg.Get(o.Worker); w != nil && filters.Eligible(w, r) {
			best = max(best, o.Tokens)
		}
	}
	return best
}

// checkLimits applies the class's queue limits in the order requests, raw ISL
// tokens, cached tokens (docs/design.md, Limits).
func (s *Scheduler) checkLimits(k int) *Error {
	c, cls := &s.pol.Classes[k], s.classes[k]
	live := uint64(s.reg.Len())
	isl, cached := cls.Tokens()
	for _, l := range [...]struct {
		kind string
		per  *uint64
		cur  uint64
	}{{"requests", c.RequestLimit, uint64(cls.Len())}, {"raw_isl_tokens", c.RawISLLimit, isl}, {"cached_tokens", c.CachedLimit, cached}} {
		if l.per == nil {
			continue
		}
		limit := satMul(*l.per, live)
		if l.cur >= limit {
			return &Error{
				Code:      request.QueueFull,
				Message:   fmt.Sprintf("policy class %q queue %s limit reached (current=%d, limit=%d)", c.Name, l.kind, l.cur, limit),
				LimitKind: l.kind, Current: l.cur, Limit: limit,
			}
		}
	}
	return nil
}

func (s *Scheduler) enqueue(r *request.Snapshot) {
	s.classes[r.Class].Push(r)
	if r.Deadline != 0 {
		s.dl.Push(r)
	}
	if s.pre.on {
		s.pre.queued(r)
	}
}

// Next returns the next dispatch or rejection of a queued request, or a
// decision of kind None when nothing queued is dispatchable. The caller calls
// it again while it returns something. One call is bounded (docs/design.md, DRR).
// With no live worker it returns None: the queues wait for a worker (Tick
// fails them once the no-workers timeout has run out).
func (s *Scheduler) Next(now int64) Decision {
	s.now = max(s.now, now)
	if s.InGrace(now) || s.reg.Len() == 0 {
		return Decision{}
	}
	k, ok := s.arbitrate(now)
	if !ok {
		return Decision{}
	}
	c := s.classes[k]
	r := c.Last()
	cost := r.DRRCost()
	if !r.Charged {
		r.Paid = true // charged its cost just now
	}
	r.Charged = true
	removeDeadline(&s.dl, r)
	if s.shed[k] != nil {
		s.drained(now, k, r.Cost)
	}
	d := s.place(now, r)
	switch d.Kind {
	case Dispatch:
		s.settle.record(now, d, r.Cost, true)
		if s.budgeted != nil && !c.LastFree() && c.Budgeted() {
			s.settle.budgeted(d, cost)
		}
	case Reject:
		s.classes[k].Release(r.Key) // nothing will complete: the key owes no settlement
	}
	return d
}

// place selects a worker for r and books it, or rejects r.
func (s *Scheduler) place(now int64, r *request.Snapshot) Decision {
	ch, code := s.sel.Select(s.reg, r)
	if code != "" {
		return Decision{Kind: Reject, Req: r, Err: s.selectionError(code, r)}
	}
	d := Decision{Kind: Dispatch, Req: r, Worker: ch.Worker.ID, Rank: ch.Rank, Compact: ch.Worker.Compact}
	if hit, ok := s.sel.KVOverlap(ch); ok {
		d.KVPrompt, d.KVOverlap = len(r.Route.Hashes), hit.Blocks
	}
	d.Prefill = s.booking(r, d)
	d.Seq = s.reg.Book(now, ch.Worker, ch.Rank, d.Prefill)
	s.gates.Update(ch.Worker)
	return d
}

func (s *Scheduler) selectionError(code request.Code, r *request.Snapshot) *Error {
	var msg string
	switch code {
	case request.PinnedWorkerNotAllowed:
		msg = fmt.Sprintf("pinned worker %q is not in Dispatch-Allowed-Workers", r.Pin.Worker)
	case request.PinnedWorkerOverloaded:
		msg = fmt.Sprintf("pinned worker %q is overloaded", r.Pin.Worker)
	case request.AllWorkersOverloaded:
		msg = "every eligible worker is overloaded"
	case request.NoEndpoints:
		if r.Pin.Pinned() {
			msg = fmt.Sprintf("pinned worker %q is not live, lacks the dp rank, or lacks a required taint", r.Pin.Worker)
		} else {
			msg = "no live worker is eligible for the request"
		}
	}
	return &Error{Code: code, Message: msg}
}

// outageError is the no_endpoints of a fleet outage that outlasted the
// no-workers timeout.
func (s *Scheduler) outageError(now int64) *Error {
	since, _ := s.Outage(now)
	return &Error{Code: request.NoEndpoints, Message: fmt.Sprintf("no live worker for %d ms (the no-workers timeout is %d ms)",
		max(0, now-since)/1e6, s.outTimeout/1e6)}
}

func (s *Scheduler) expire(now int64, r *request.Snapshot) Decision {
	return Decision{Kind: Reject, Req: r, Err: &Error{
		Code:    request.Expired,
		Message: fmt.Sprintf("deadline passed while queued (queued %d ms)", max(0, now-r.Arrival)/1e6),
	}}
}

// Return hands back a request whose dispatch to worker id with sequence seq was
// refused, found no responder, or timed out (docs/protocol.md, Dispatch handshake): the refusal is
// recorded (Refused), and the request waits in its lane with its place kept,
// not charged again and without a limit check.
func (s *Scheduler) Return(now int64, r *request.Snapshot, id string, seq uint64) {
	s.refused(now, id, seq)
	// The request is queued again, charged: its key stays owed, and the next
	// dispatch's record takes over the settlement.
	s.settle.forget(id, seq, false)
	r.Refused = true
	r.Charged = true
	s.enqueue(r)
}

// Refused records that worker id refused its dispatch with sequence seq, or
// did not answer it: the booking is released and the worker is excluded for a
// time growing with its refusals in a row (docs/protocol.md, Refusals back off).
func (s *Scheduler) Refused(now int64, id string, seq uint64) {
	s.refused(now, id, seq)
	s.settle.forget(id, seq, true) // the request leaves: its key owes nothing
}

func (s *Scheduler) refused(now int64, id string, seq uint64) {
	if w := s.reg.Get(id); w != nil {
		s.reg.Unbook(w, seq)
		s.reg.Refused(now, w, seq)
		s.gates.Update(w)
	}
}

// Accepted records that worker id accepted a dispatch: its refusals in a row
// reset and its exclusion, if any, ends (docs/protocol.md, Refusals back off).
func (s *Scheduler) Accepted(id string) {
	w := s.reg.Get(id)
	if w == nil || !s.reg.Accepted(w) {
		return
	}
	s.gates.Update(w)
	for _, c := range s.classes {
		c.Recheck(w.ID)
	}
}

// Unsent takes back a dispatch to worker id with sequence seq that never
// reached the worker through no fault of its own (docs/decisions.md, Whose
// fault is an error): its booking is released and the worker is not excluded.
// With requeue (the connection failed) the request waits in its lane again, as
// after a refusal: its place kept, not charged again, without a limit check.
// Without requeue (the request itself cannot be sent) the caller rejects it.
func (s *Scheduler) Unsent(r *request.Snapshot, id string, seq uint64, requeue bool) {
	s.settle.forget(id, seq, !requeue)
	if w := s.reg.Get(id); w != nil && s.reg.Unsent(w, seq) {
		s.gates.Update(w)
		for _, c := range s.classes {
			c.Recheck(w.ID)
		}
	}
	if requeue {
		r.Refused = true
		r.Charged = true
		s.enqueue(r)
	}
}

// Report applies a load report received at now (docs/protocol.md, Load report) and re-checks the
// lanes it may unblock (docs/design.md, When queues are re-checked). It returns false when the report was
// refused because the registry is full.
func (s *Scheduler) Report(now int64, rep workers.Report) bool {
	_, ok := s.ApplyReport(now, rep)
	return ok
}

// ApplyReport is Report, also returning what the report did: in particular
// whether it was dropped as coming from a second instance of the worker id
// (Change.Rival) and whether two instances are live under it (Change.Conflict).
func (s *Scheduler) ApplyReport(now int64, rep workers.Report) (workers.Change, bool) {
	w, ch, ok := s.reg.Apply(now, rep)
	if !ok {
		return ch, false
	}
	if ch.Rival {
		return ch, true
	}
	if ch.Restarted {
		s.pre.dropWorker(w.ID)
	}
	s.sel.Thresholds.UpdateLatch(w)
	s.gates.Update(w)
	if ch.New {
		s.recheckAll()
		return ch, true
	}
	for _, c := range s.classes {
		c.Recheck(w.ID)
	}
	return ch, true
}

// Tick advances time: workers whose TTL ran out are removed (and every lane
// re-checked), and queued requests whose deadline passed are rejected, appended
// to dst. Once a fleet outage has lasted the no-workers timeout, every queued
// request is rejected as no_endpoints too (docs/design.md, Fleet outage).
func (s *Scheduler) Tick(now int64, dst []Decision) []Decision {
	s.now = max(s.now, now)
	s.expired = s.reg.Expire(now, s.expired[:0])
	for _, w := range s.expired {
		s.gates.Remove(w)
		s.pre.dropWorker(w.ID)
		if s.kv != nil {
			// Its cache state may be gone with it; if it comes back under
			// the same instance, its next event shows a gap and it
			// resynchronises (docs/protocol.md, Resynchronisation).
			s.kv.DropWorker(w.ID)
		}
	}
	if len(s.expired) > 0 && s.reg.Len() == 0 {
		s.lostAt = now
	}
	for _, w := range s.reg.Aged() {
		s.gates.Update(w)
		for _, c := range s.classes {
			c.Recheck(w.ID)
		}
	}
	if len(s.expired) > 0 {
		clear(s.expired)
		s.recheckAll()
	}
	s.settle.expire(now)
	for _, k := range s.budgeted {
		s.classes[k].PruneBudgets(now)
	}
	for len(s.dl) > 0 && s.dl[0].Deadline <= now {
		r := s.dl[0]
		removeDeadline(&s.dl, r)
		s.classes[r.Class].Remove(r)
		dst = append(dst, s.expire(now, r))
	}
	if _, out := s.Outage(now); out && !s.holding(now) {
		dst = s.failQueued(now, dst)
	}
	return dst
}

// failQueued rejects every queued request as no_endpoints, appending the
// decisions to dst, in class ring order. O(queued × log queued).
func (s *Scheduler) failQueued(now int64, dst []Decision) []Decision {
	start := len(dst)
	for _, c := range s.classes {
		c.Each(func(r *request.Snapshot) bool {
			dst = append(dst, Decision{Kind: Reject, Req: r, Err: s.outageError(now)})
			return true
		})
	}
	for _, d := range dst[start:] {
		s.Remove(d.Req)
	}
	return dst
}

// Remove takes a queued request out of the scheduler (its message is handed
// back: the dispatcher lost the lead or is stopping). A request that is not
// queued is left alone.
func (s *Scheduler) Remove(r *request.Snapshot) {
	if r == nil || r.Index < 0 {
		return
	}
	removeDeadline(&s.dl, r)
	s.classes[r.Class].Remove(r)
}

// NextDeadline returns the earliest deadline of a queued request, or 0.
func (s *Scheduler) NextDeadline() int64 {
	if len(s.dl) == 0 {
		return 0
	}
	return s.dl[0].Deadline
}

// SetThresholds changes the busy thresholds (docs/design.md, Worker selection; docs/config.md, Admin HTTP API) and re-checks everything.
func (s *Scheduler) SetThresholds(t filters.Thresholds) {
	s.sel.Thresholds = t
	for _, w := range s.reg.All() {
		t.UpdateLatch(w)
	}
	s.recheckAll()
}

// Thresholds returns the busy thresholds in force.
func (s *Scheduler) Thresholds() filters.Thresholds { return s.sel.Thresholds }

// Pause stops the worker TTL clocks (the dispatcher is disconnected).
func (s *Scheduler) Pause() { s.reg.Pause() }

// Resume restarts them from now.
func (s *Scheduler) Resume(now int64) { s.reg.Resume(now) }

// RecheckAll returns every blocked lane to the ready index, to be examined
// again: the timer's safety net (docs/design.md, When queues are re-checked). O(blocked lanes × log L).
func (s *Scheduler) RecheckAll() { s.recheckAll() }

func (s *Scheduler) recheckAll() {
	for _, c := range s.classes {
		c.RecheckAll()
	}
}

// Queued returns the number of requests queued in class k.
func (s *Scheduler) Queued(k int) int { return s.classes[k].Len() }

// Class returns class k's queue, for reading (keys and their service).
func (s *Scheduler) Class(k int) *lanes.Keyed { return s.classes[k] }

// satMul multiplies without wrapping.
func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}

// TopKeys is how many keys per class wire.ClassStats lists.
const TopKeys = 10

// topKeys returns class c's TopKeys keys with the most queued requests. O(K).
func topKeys(c *lanes.Keyed) []wire.KeyStats {
	var top []wire.KeyStats
	vt := c.VirtualTime()
	c.EachKey(func(name string, service, weight float64, queued int) bool {
		if len(top) == TopKeys && queued <= top[len(top)-1].Queued {
			return true
		}
		ks := wire.KeyStats{Key: name, Queued: queued, Weight: weight, Lead: service - vt}
		i := len(top)
		if i < TopKeys {
			top = append(top, ks)
		} else {
			i--
		}
		for ; i > 0 && (top[i-1].Queued < queued || top[i-1].Queued == queued && top[i-1].Key > name); i-- {
			top[i] = top[i-1]
		}
		top[i] = ks
		return true
	})
	return top
}

// Stats appends every class's stats to dst, in ring order. O(C + pinned lanes +
// tracked keys).
func (s *Scheduler) Stats(dst []wire.ClassStats) []wire.ClassStats {
	for k, c := range s.classes {
		isl, cached := c.Tokens()
		pinned, blocked := c.Lanes()
		cs := wire.ClassStats{
			Name: s.pol.Classes[k].Name, Pending: c.Len(), ISLTokens: isl, CachedTokens: cached,
			Deficit: s.arb.Deficit(k), Keys: c.Keys(), TopKeys: topKeys(c), PinnedLanes: pinned, BlockedLanes: blocked, FreeRanks: s.gates.Free(k),
		}
		s.extensionStats(k, &cs)
		dst = append(dst, cs)
	}
	return dst
}

// Overloaded reports whether worker w is overloaded under the thresholds in force.
func (s *Scheduler) Overloaded(w *workers.Worker) bool { return s.sel.Thresholds.Overloaded(w) }

// kvCached is admission's overlap from the KV cache index, which replaces
// Dispatch-Worker-Overlap and Dispatch-Cached-Tokens when the request carries
// block hashes (docs/protocol.md, Overlap): the best weighted overlap over the
// eligible ranks (the pinned worker's, or its pinned rank's, when pinned),
// converted to tokens with the scoring's block size.
func (s *Scheduler) kvCached(a *request.Arrival, r *request.Snapshot) uint64 {
	s.kv.Overlap(a.Hashes, &s.kvOut)
	best := 0.0
	for _, h := range s.kvOut.Hits {
		switch {
		case r.Pin.Pinned():
			if h.Worker != r.Pin.Worker || (r.Pin.Rank != request.AnyRank && h.Rank != r.Pin.Rank) {
				continue
			}
		default:
			if w := s.reg.Get(h.Worker); w == nil || !w.HasRank(h.Rank) || !filters.Eligible(w, r) {
				continue
			}
		}
		best = max(best, h.Weighted)
	}
	return uint64(best * s.sel.Scoring.BlockSize)
}
