package scheduler

import (
	"math"
	"slices"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Timing of preemption (docs/design.md, Preemption).
const (
	// PreemptAnswerWait is how long, in nanoseconds, an ask to preempt counts
	// as under way: the slot it frees is expected within it. An ask that
	// frees nothing in that time (the worker had sent a response chunk and
	// ignored it, it restarted, or the request had finished) is not repeated
	// for that dispatch; another may be asked.
	PreemptAnswerWait = int64(500e6)
	// preemptBackAge is how long a preempted request is remembered, in
	// nanoseconds, waiting for the stream to deliver it again.
	preemptBackAge = int64(60e9)
)

// Preemption is the scheduler's decision to ask a worker to stop one
// request of a sheddable class and hand it back (docs/design.md,
// Preemption): the dispatcher sends a cancellation with reason preempt to
// <prefix>.cancel.<Worker>.
type Preemption struct {
	Worker    string
	Seq       uint64 // the dispatch's Dispatch-Seq
	RequestID string
	Class     int // the preempted request's class
	For       int // the class of the request that waited past its bound
	Waited    int64
}

// runEntry is one accepted dispatch of a sheddable class, running at its
// worker as far as the scheduler knows.
type runEntry struct {
	seq       uint64
	id        string
	class     int
	rank      int32 // the data-parallel rank it runs on
	at        int64 // when it was accepted
	preempted uint8 // how often it was preempted before this dispatch
	asked     int64 // when it was asked to stop; 0: never
}

// backRec is a preempted request waiting to come back.
type backRec struct {
	n      uint8 // times preempted, this one included
	worker string
	seq    uint64
	at     int64
}

// ask is a preemption under way: asked at at, for the queued request r.
type ask struct {
	at int64
	r  *request.Snapshot
}

// preemptions is the scheduler's preemption state (docs/design.md,
// Preemption). It costs a class that neither preempts nor is sheddable one
// bool check per accepted dispatch and per dispatchability question.
type preemptions struct {
	on        bool    // some class preempts and some class is sheddable
	sheddable []bool  // per class
	after     []int64 // per class, ns; 0: the class does not preempt
	max       []uint8 // per class: max_preemptions
	yield     bool    // sheddable classes hold back: a preemption is under way
	// waiting holds, per class that preempts, its queued requests in
	// arrival order (lazily cleaned: entries no longer queued are skipped).
	waiting [][]*request.Snapshot
	running map[string][]runEntry // worker id -> its sheddable dispatches
	back    map[string]backRec    // request id -> the preemption it comes back from
	asks    []ask
	seen    map[*request.Snapshot]struct{} // scratch of scan
	asked   map[string]uint64              // class name -> preemptions asked, for Stats
	// Counters, for Describe and metrics.
	Asked, Returned, Ignored uint64
}

func (p *preemptions) init() {
	p.running = map[string][]runEntry{}
	p.back = map[string]backRec{}
	p.seen = map[*request.Snapshot]struct{}{}
	p.asked = map[string]uint64{}
}

// configure reads the policy's preemption settings; to maps old class
// indices to new ones (-1: removed), nil at start.
func (s *Scheduler) configurePreemption(to []int) {
	p := &s.pre
	n := len(s.pol.Classes)
	p.sheddable, p.after, p.max = make([]bool, n), make([]int64, n), make([]uint8, n)
	anyShed, anyAfter := false, false
	for k, c := range s.pol.Classes {
		p.sheddable[k] = c.Sheddable
		p.max[k] = uint8(min(c.MaxPreemptions, math.MaxUint8))
		if c.PreemptAfterMs != nil && !c.Sheddable {
			p.after[k] = max(1, int64(min(*c.PreemptAfterMs, 1<<40))*1e6)
			anyAfter = true
		}
		anyShed = anyShed || c.Sheddable
	}
	p.on = anyShed && anyAfter
	for w, es := range p.running {
		kept := es[:0]
		for _, e := range es {
			if to != nil {
				if e.class < 0 || e.class >= len(to) || to[e.class] < 0 {
					continue
				}
				e.class = to[e.class]
			}
			if p.sheddable[e.class] {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			delete(p.running, w)
		} else {
			p.running[w] = kept
		}
	}
	p.asks = p.asks[:0]
	if p.yield {
		p.yield = false
		if s.classes != nil {
			s.recheckAll()
		}
	}
	p.waiting = make([][]*request.Snapshot, n)
	if !p.on || s.classes == nil {
		return
	}
	for k := range s.classes {
		if p.after[k] == 0 {
			continue
		}
		s.classes[k].Each(func(r *request.Snapshot) bool {
			p.waiting[k] = append(p.waiting[k], r)
			return true
		})
		slices.SortFunc(p.waiting[k], func(a, b *request.Snapshot) int { return int(min(1, max(-1, a.Arrival-b.Arrival))) })
	}
}

// holdsBack reports whether class k holds back for a preemption under way.
func (p *preemptions) holdsBack(k int) bool {
	return p.yield && k >= 0 && k < len(p.sheddable) && p.sheddable[k]
}

// queued notes that r was queued, for a class that preempts.
func (p *preemptions) queued(r *request.Snapshot) {
	if !p.on || p.after[r.Class] == 0 {
		return
	}
	w := p.waiting[r.Class]
	if len(w) > 64 && len(w) > 4*cap(w)/5 {
		// Drop what is no longer queued before growing.
		kept := w[:0]
		for _, x := range w {
			if x.Index >= 0 && x.Class == r.Class {
				kept = append(kept, x)
			}
		}
		clear(w[len(kept):])
		w = kept
	}
	p.waiting[r.Class] = append(w, r)
}

// readmit marks a request that comes back after a preemption, refunding the
// dispatch it was preempted from (docs/design.md, Preemption).
func (s *Scheduler) readmit(r *request.Snapshot) {
	p := &s.pre
	if len(p.back) == 0 {
		return
	}
	b, ok := p.back[r.ID]
	if !ok {
		return
	}
	delete(p.back, r.ID)
	r.Preempted = b.n
	p.Returned++
	s.refund(b.worker, b.seq)
	p.dropRunning(b.worker, b.seq)
}

// refund takes back everything the dispatch (worker, seq) charged: its
// key's service, its class's deficit and its budget, as if it had never been
// served; the settlement that may follow (a completion record with status
// cancelled) changes nothing more.
func (s *Scheduler) refund(worker string, seq uint64) {
	rec := s.settle.find(worker, seq)
	if rec == nil || rec.settled {
		return
	}
	rec.settled = true
	if !rec.owes || rec.class < 0 || rec.class >= len(s.classes) {
		return
	}
	back := -int64(min(rec.charged, math.MaxInt64/4))
	s.arb.Charge(rec.class, back)
	s.classes[rec.class].Settle(rec.key, back)
	if rec.budget > 0 {
		s.classes[rec.class].ChargeBudget(s.now, rec.key, -int64(min(rec.budget, math.MaxInt64/4)))
	}
}

// Started records that worker accepted the dispatch seq of r to its rank
// (docs/protocol.md, Dispatch handshake): a request of a sheddable class is
// then one the scheduler may preempt. O(1); nothing for other classes.
func (s *Scheduler) Started(now int64, r *request.Snapshot, worker string, rank int32, seq uint64) {
	p := &s.pre
	if !p.on || r == nil || r.Class < 0 || r.Class >= len(p.sheddable) || !p.sheddable[r.Class] {
		return
	}
	if rec := s.settle.find(worker, seq); rec != nil && rec.settled {
		// Its completion record came first (the two arrive apart): it ran
		// already, and must not wait for a preemption as running.
		return
	}
	p.running[worker] = append(p.running[worker], runEntry{seq: seq, id: r.ID, class: r.Class, rank: rank, at: now, preempted: r.Preempted})
}

// dropRunning forgets the running dispatch (worker, seq).
func (p *preemptions) dropRunning(worker string, seq uint64) {
	es := p.running[worker]
	for i := range es {
		if es[i].seq == seq {
			es = slices.Delete(es, i, i+1)
			break
		}
	}
	if len(es) == 0 {
		delete(p.running, worker)
	} else {
		p.running[worker] = es
	}
}

// dropWorker forgets every running dispatch of a worker that expired or
// restarted: what it ran is gone.
func (p *preemptions) dropWorker(worker string) {
	if len(p.running) > 0 {
		delete(p.running, worker)
	}
}

// Preempt decides the preemptions to ask at now, appended to dst
// (docs/design.md, Preemption). For each class with preempt_after_ms, each
// of its queued requests that has waited longer than that, oldest first,
// gets one ask unless one is under way for it:
// the victim is a running request of a sheddable class, preempted fewer than
// its class's max_preemptions times and not asked before, on a worker that
// declares preemption support and is eligible for the waiting request; of
// those, the one preempted least often, then the most recently started (the
// least work lost). While asks are under way,
// sheddable classes hold back, so that the slot freed goes to the request
// that waited. Call it at every tick. O(1) when no class preempts; else
// O(overdue × running sheddable dispatches) plus the cleaning of the
// waiting lists.
func (s *Scheduler) Preempt(now int64, dst []Preemption) []Preemption {
	p := &s.pre
	if !p.on {
		return dst
	}
	s.now = max(s.now, now)
	// Asks past their wait, or whose request no longer waits, are over.
	kept := p.asks[:0]
	for _, a := range p.asks {
		if now-a.at < PreemptAnswerWait && a.r.Index >= 0 {
			kept = append(kept, a)
		}
	}
	clear(p.asks[len(kept):])
	p.asks = kept
	for id, b := range p.back {
		if now-b.at > preemptBackAge {
			delete(p.back, id)
		}
	}
	if s.reg.Len() > 0 && !s.InGrace(now) {
		for k, after := range p.after {
			if after != 0 && len(p.waiting[k]) > 0 {
				dst = s.preemptFor(now, k, after, dst)
			}
		}
	}
	yield := len(p.asks) > 0
	if yield != p.yield {
		p.yield = yield
		if !yield {
			s.recheckAll()
		}
	}
	return dst
}

// preemptFor asks the preemptions class k's overdue requests need.
func (s *Scheduler) preemptFor(now int64, k int, after int64, dst []Preemption) []Preemption {
	p := &s.pre
	w := p.waiting[k]
	i := 0
	for i < len(w) && (w[i].Index < 0 || w[i].Class != k) {
		w[i] = nil
		i++
	}
	w = w[i:]
	p.waiting[k] = w
	clear(p.seen)
	for _, a := range p.asks {
		p.seen[a.r] = struct{}{} // an ask under way serves it
	}
	for _, r := range w {
		if now-r.Arrival < after {
			break
		}
		if r.Index < 0 || r.Class != k {
			continue
		}
		if _, dup := p.seen[r]; dup {
			continue
		}
		p.seen[r] = struct{}{}
		if pr, ok := s.victim(now, r); ok {
			pr.For, pr.Waited = k, now-r.Arrival
			dst = append(dst, pr)
			p.asks = append(p.asks, ask{at: now, r: r})
			p.Asked++
		}
	}
	return dst
}

// victim picks the running sheddable dispatch to preempt for r, and marks
// it asked.
func (s *Scheduler) victim(now int64, r *request.Snapshot) (Preemption, bool) {
	p := &s.pre
	var best *runEntry
	var bestW *workers.Worker
	for _, wk := range s.reg.All() {
		es := p.running[wk.ID]
		if len(es) == 0 || !wk.Preempt || wk.Draining || !filters.Eligible(wk, r) ||
			(r.Pin.Pinned() && r.Pin.Worker != wk.ID) {
			continue
		}
		for i := range es {
			e := &es[i]
			if e.asked != 0 || e.preempted >= p.max[e.class] ||
				(r.Pin.Pinned() && r.Pin.Rank != request.AnyRank && r.Pin.Rank != e.rank) {
				continue
			}
			if best == nil || e.preempted < best.preempted ||
				(e.preempted == best.preempted && (e.at > best.at || (e.at == best.at && wk.ID < bestW.ID))) {
				best, bestW = e, wk
			}
		}
	}
	if best == nil {
		return Preemption{}, false
	}
	best.asked = now
	p.asked[s.pol.Classes[best.class].Name]++
	p.back[best.id] = backRec{n: best.preempted + 1, worker: bestW.ID, seq: best.seq, at: now}
	return Preemption{Worker: bestW.ID, Seq: best.seq, RequestID: best.id, Class: best.class}, true
}

// handedBack reports whether the dispatch (worker, seq) of request id was
// asked to stop, and forgets it as running: its cancelled record is the
// hand-back.
func (p *preemptions) handedBack(worker string, seq uint64, id string) bool {
	b, ok := p.back[id]
	if !ok || b.worker != worker || b.seq != seq {
		return false
	}
	p.dropRunning(worker, seq)
	return true
}

// settled forgets a running dispatch its completion record settled: it
// finished (a preemption asked of it meanwhile frees its slot all the same).
func (p *preemptions) settled(worker string, seq uint64, id string) {
	if !p.on {
		return
	}
	if b, ok := p.back[id]; ok && b.worker == worker && b.seq == seq {
		delete(p.back, id) // finished before the preemption: it will not come back
		p.Ignored++
	}
	if len(p.running[worker]) > 0 {
		p.dropRunning(worker, seq)
	}
}
