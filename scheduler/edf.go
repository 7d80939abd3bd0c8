package scheduler

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"fairdispatch/configs"
	"fairdispatch/request"
)

// order sets r's place within its class (docs/design.md, Lanes; Deadlines):
// its score from the class's queue policy, and its Due, the effective
// deadline in an edf class (math.MaxInt64 without one), 0 elsewhere. A
// preempted request goes to the head of its lane (docs/design.md,
// Preemption).
func (s *Scheduler) order(r *request.Snapshot) {
	q := s.pol.Classes[r.Class].Queue
	r.Score = score(q, r)
	r.Due = 0
	if q == configs.EDF {
		r.Due = math.MaxInt64
		if r.Deadline != 0 {
			r.Due = r.Deadline
		}
	}
	if r.Preempted > 0 {
		// The head of its lane, ahead of every strict tier (Due is
		// compared first, and 0 outside edf classes).
		r.Score, r.Due = math.MaxFloat64, math.MinInt64
	}
}

// applyDeadlines gives r the tightest of its own deadline and its class's
// and key's (docs/design.md, Deadlines). O(1): one map lookup when the class
// names key deadlines.
func (s *Scheduler) applyDeadlines(r *request.Snapshot, published int64) {
	c := &s.pol.Classes[r.Class]
	if c.DeadlineMs == nil && c.KeyDeadlinesMs == nil {
		return
	}
	ms, ok := c.KeyDeadline(r.Key)
	if !ok {
		return
	}
	d := published + int64(min(ms, configs.MaxTokens))*1e6
	if r.Deadline == 0 || d < r.Deadline {
		r.Deadline = d
	}
}

// drainTau is the time constant, in nanoseconds, of a class's measured
// drain rate: an exponentially weighted average over about the last 2 s of
// the time it was backlogged.
const drainTau = 2e9

// minDrainBusy is how much backlogged time, in nanoseconds (weighted as the
// rate is), a drain rate needs before shedding trusts it.
const minDrainBusy = 0.5e9

// drainRate measures how fast a class's queue drains while backlogged: the
// cost it dispatched from its queue over the time it had a queue, both
// weighted by exp(-age / drainTau).
type drainRate struct {
	acc, busy float64
	at        int64
}

// advance ages the measure to now; backlogged says whether the class had a
// queue since the last call.
func (d *drainRate) advance(now int64, backlogged bool) {
	dt := now - d.at
	if dt <= 0 {
		return
	}
	if d.at == 0 {
		d.at = now
		return
	}
	d.at = now
	f := math.Exp(-float64(dt) / drainTau)
	d.acc *= f
	d.busy *= f
	if backlogged {
		d.busy += (1 - f) * drainTau
	}
}

// rate returns the drain rate in cost units per nanosecond, and whether it
// has been measured long enough.
func (d *drainRate) rate() (float64, bool) {
	if d.busy < minDrainBusy || d.acc <= 0 {
		return 0, false
	}
	return d.acc / d.busy, true
}

// dueSlot is the width, in nanoseconds, of a slot of dueTally; dueSlots
// slots cover the deadlines of the next 51.2 s.
const (
	dueSlot  = int64(50e6)
	dueSlots = 1024
)

// dueTally is a histogram of a class's queued cost by deadline, for the
// work ahead of a new request (docs/design.md, Shedding): a ring of
// dueSlots slots of dueSlot from the slot of base, the cost due before it
// (past: about to expire), the cost due beyond the ring by slot (far), the
// cost with no deadline (none) and that of preempted requests, which go
// first (head). It implements lanes.Tally. Add and Sub are O(1) amortized;
// ahead is O(dueSlots + far slots).
type dueTally struct {
	base  int64 // the ring's first slot (absolute: deadline / dueSlot)
	ring  [dueSlots]float64
	past  float64
	far   map[int64]float64
	none  float64
	head  float64
	total float64
}

func newDueTally(now int64) *dueTally {
	return &dueTally{base: now / dueSlot, far: map[int64]float64{}}
}

func (t *dueTally) slot(r *request.Snapshot) (int64, bool) {
	if r.Deadline == 0 {
		return 0, false
	}
	return r.Deadline / dueSlot, true
}

func (t *dueTally) move(r *request.Snapshot, c float64) {
	t.total += c
	sl, ok := t.slot(r)
	switch {
	case r.Preempted > 0:
		t.head += c
	case !ok:
		t.none += c
	case sl < t.base:
		t.past += c
	case sl >= t.base+dueSlots:
		t.far[sl] += c
		if t.far[sl] <= 0 {
			delete(t.far, sl)
		}
	default:
		t.ring[sl%dueSlots] += c
	}
}

// Add counts r.
func (t *dueTally) Add(r *request.Snapshot) { t.move(r, float64(r.Cost)) }

// Sub uncounts r.
func (t *dueTally) Sub(r *request.Snapshot) { t.move(r, -float64(r.Cost)) }

// advance moves the ring's start to now's slot: slots passed go to past,
// far slots coming into the ring move in.
func (t *dueTally) advance(now int64) {
	to := now / dueSlot
	if to <= t.base {
		return
	}
	if to-t.base >= dueSlots {
		for i := range t.ring {
			t.past += t.ring[i]
			t.ring[i] = 0
		}
		t.base = to
		for sl, c := range t.far {
			if sl < t.base+dueSlots {
				if sl < t.base {
					t.past += c
				} else {
					t.ring[sl%dueSlots] += c
				}
				delete(t.far, sl)
			}
		}
		return
	}
	for ; t.base < to; t.base++ {
		i := t.base % dueSlots
		t.past += t.ring[i]
		t.ring[i] = 0
		in := t.base + dueSlots // the slot that takes index i
		if c, ok := t.far[in]; ok {
			t.ring[i] += c
			delete(t.far, in)
		}
	}
}

// ahead returns the queued cost that earliest-deadline-first serves before a
// request due at due, at now, draining rate cost units per nanosecond:
// preempted requests first, then slot by slot in deadline order, each slot
// counted only as far as it can still be served before its own deadline (the
// rest expires instead of taking capacity), half of due's own slot. What is
// about to expire (past) takes nothing.
func (t *dueTally) ahead(now, due int64, rate float64) float64 {
	sl := due / dueSlot
	a := t.head
	take := func(s int64, c float64) {
		if c <= 0 {
			return
		}
		room := rate*float64((s+1)*dueSlot-now) - a
		a += max(0, min(c, room))
	}
	last := min(sl-1, t.base+dueSlots-1)
	for s := t.base; s <= last; s++ {
		take(s, t.ring[s%dueSlots])
	}
	if sl >= t.base && sl < t.base+dueSlots {
		a += t.ring[sl%dueSlots] / 2 // its own slot: not clamped, r is among it
	}
	if sl >= t.base+dueSlots && len(t.far) > 0 {
		slots := make([]int64, 0, len(t.far))
		for s := range t.far {
			if s <= sl {
				slots = append(slots, s)
			}
		}
		slices.Sort(slots)
		for _, s := range slots {
			if s == sl {
				a += t.far[s] / 2
				continue
			}
			take(s, t.far[s])
		}
	}
	return a
}

// shedState is a shedding class's estimate state.
type shedState struct {
	drain drainRate
	edf   bool      // ahead is what is due before; otherwise everything queued
	tally *dueTally // the class's queued cost by deadline
	// arrivals is the cost arriving in an edf class by the time left to its
	// deadline at arrival, bucket b holding times in [2^(b-1), 2^b) ms,
	// weighted by exp(-age / drainTau); arrivedSince is when it started.
	arrivals     [40]float64
	arrivedAt    int64
	arrivedSince int64
}

// arrivalBucket is the bucket of arrivals of a request with left
// nanoseconds to its deadline.
func arrivalBucket(left int64) int {
	return min(39, bits.Len64(uint64(max(0, left/1e6))))
}

// arrived counts a request of cost arriving at now with left to its deadline.
func (st *shedState) arrived(now, left int64, cost uint64) {
	if st.arrivedSince == 0 {
		st.arrivedSince, st.arrivedAt = now, now
	}
	if dt := now - st.arrivedAt; dt > 0 {
		f := math.Exp(-float64(dt) / drainTau)
		for i := range st.arrivals {
			st.arrivals[i] *= f
		}
		st.arrivedAt = now
	}
	st.arrivals[arrivalBucket(left)] += float64(cost)
}

// jumpRate is the rate, in cost units per nanosecond, at which work arrives
// that earliest-deadline-first will serve before a request with left to its
// deadline: requests whose whole bucket of time left is shorter.
func (st *shedState) jumpRate(now, left int64) float64 {
	span := drainTau * (1 - math.Exp(-float64(now-st.arrivedSince)/drainTau))
	if span < minDrainBusy {
		return 0
	}
	var sum float64
	for b := range arrivalBucket(left) {
		sum += st.arrivals[b]
	}
	return sum / span
}

// projectWait returns the wait projected for r, queued now in its shedding
// class: the cost queued ahead of it (in an edf class, due before it;
// otherwise all of it) over the class's measured drain rate; ok is false
// while the rate is not measured yet.
func (s *Scheduler) projectWait(now int64, r *request.Snapshot) (int64, bool) {
	st := s.shed[r.Class]
	st.drain.advance(now, !s.classes[r.Class].Empty())
	rate, ok := st.drain.rate()
	if !ok {
		return 0, false
	}
	st.tally.advance(now)
	ahead := st.tally.total - st.tally.past
	if st.edf && r.Deadline != 0 {
		left := r.Deadline - now
		st.arrived(now, left, r.Cost)
		ahead = st.tally.ahead(now, r.Deadline, rate)
		// What arrives later with less time left goes first: the rate left
		// for r is the drain rate less that arrival rate.
		rate -= st.jumpRate(now, left)
		if rate <= 0 {
			return math.MaxInt64 / 4, true
		}
	}
	ahead += float64(r.Cost)
	return int64(min(ahead/rate, math.MaxInt64/4)), true
}

// shedSlack is the margin of shedding: a request is shed only when its
// projected wait passes its time left by more than this fraction of it.
const shedSlack = 0.25

// checkShed rejects r at admission as deadline_unreachable when its class
// sheds and r's projected wait passes its deadline (docs/design.md,
// Shedding). It returns the projection too (-1 when there is none), for the
// caller to measure the estimate against the real wait.
func (s *Scheduler) checkShed(now int64, r *request.Snapshot) (int64, *Error) {
	if s.shed[r.Class] == nil {
		return -1, nil
	}
	wait, ok := s.projectWait(now, r)
	if !ok {
		return -1, nil
	}
	left := max(0, r.Deadline-now)
	if r.Deadline == 0 || float64(wait) <= float64(left)*(1+shedSlack) || r.Preempted > 0 {
		return wait, nil
	}
	return wait, &Error{Code: request.DeadlineUnreachable, Projected: wait,
		Message: fmt.Sprintf("projected wait %d ms passes the deadline in %d ms", wait/1e6, left/1e6)}
}

// drained records a dispatch of cost from class k's queue at now.
func (s *Scheduler) drained(now int64, k int, cost uint64) {
	if st := s.shed[k]; st != nil {
		st.drain.advance(now, true)
		st.drain.acc += float64(cost)
	}
}

// indexShed builds the shedding state of classes that shed, keeping the
// measured drain rate of a class kept by name (old maps a new index to the
// old, -1 for none) and counting the requests already queued.
func (s *Scheduler) indexShed(now int64, old []*shedState, from []int) {
	shed := make([]*shedState, len(s.pol.Classes))
	for k := range s.pol.Classes {
		c := &s.pol.Classes[k]
		if !c.ShedUnreachable {
			continue
		}
		st := &shedState{edf: c.Queue == configs.EDF, tally: newDueTally(now)}
		if from != nil && from[k] >= 0 && old[from[k]] != nil {
			st.drain = old[from[k]].drain
		}
		shed[k] = st
	}
	s.shed = shed
}
