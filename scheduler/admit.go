package scheduler

import (
	"fmt"
	"slices"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/lanes"
	"fairdispatch/request"
)

// Admission (docs/design.md, Admission): the snapshot, class resolution,
// limits, and queue or dispatch.

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
	direct, open := s.route(r, cls, cfg)
	if direct {
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
	if !open { // the limits bound a backlog: a request queued only for its budget or a hold-back makes none
		if err := s.checkLimits(r.Class); err != nil {
			return Decision{Kind: Reject, Req: r, Err: err}
		}
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

// route decides how r, admitted outside the grace and an outage, goes on
// (docs/design.md, Queue or dispatch). open: its class does not queue, or
// holds nothing and is neither held back by a preemption nor gated for r,
// so r makes no backlog. direct: open and r goes straight to selection;
// not while a preemption holds r's class back, nor when r's key has a
// token budget, whose charge is an arbitration's: such a request is queued
// and the next arbitration, right after, dispatches it if its budget covers
// it (docs/design.md, Token budgets).
func (s *Scheduler) route(r *request.Snapshot, cls *lanes.Keyed, cfg *configs.Class) (direct, open bool) {
	held := s.pre.holdsBack(r.Class)
	open = !cfg.Queues() || (cls.Empty() && !held && !s.gates.GatedFor(r.Class, r))
	return open && !held && !(len(s.budgeted) > 0 && cls.KeyBudgeted(r.Key)), open
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
