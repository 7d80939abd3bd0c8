package scheduler

import (
	"fmt"
	"math"

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
		r.Score = math.MaxFloat64
		if r.Due != 0 {
			r.Due = math.MinInt64
		}
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
// (past), the cost due beyond the ring by slot (far), and the cost with no
// deadline (none). It implements lanes.Tally. Add and Sub are O(1)
// amortized; ahead is O(dueSlots).
type dueTally struct {
	base  int64 // the ring's first slot (absolute: deadline / dueSlot)
	ring  [dueSlots]float64
	past  float64
	far   map[int64]float64
	none  float64
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
	case !ok:
		t.none += c
	case sl < t.base || r.Preempted > 0:
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

// ahead returns the queued cost due before deadline due (half of its own
// slot's), at now.
func (t *dueTally) ahead(due int64) float64 {
	sl := due / dueSlot
	a := t.past
	if sl >= t.base+dueSlots {
		a = t.total - t.none
		for s, c := range t.far {
			if s >= sl {
				a -= c
			}
		}
		return a
	}
	for s := t.base; s < sl; s++ {
		a += t.ring[s%dueSlots]
	}
	if sl >= t.base {
		a += t.ring[sl%dueSlots] / 2
	}
	return a
}

// shedState is a shedding class's estimate state.
type shedState struct {
	drain drainRate
	edf   bool      // ahead is what is due before; otherwise everything queued
	tally *dueTally // the class's queued cost by deadline
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
	ahead := st.tally.total
	if st.edf && r.Deadline != 0 {
		ahead = st.tally.ahead(r.Deadline)
	}
	ahead += float64(r.Cost)
	return int64(min(ahead/rate, math.MaxInt64/4)), true
}

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
	if r.Deadline == 0 || now+wait <= r.Deadline || r.Preempted > 0 {
		return wait, nil
	}
	left := max(0, r.Deadline-now)
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
