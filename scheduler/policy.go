package scheduler

import (
	"maps"

	"fairdispatch/configs"
	"fairdispatch/drr"
	"fairdispatch/filters"
	"fairdispatch/lanes"
	"fairdispatch/request"
)

// PolicyChange says what SetPolicy did.
type PolicyChange struct {
	// To maps a class index of the old policy to its index in the new one,
	// or -1 for a class the new policy removed.
	To []int
	// Added and Removed name the classes the new policy adds and removes, in
	// the order of the policy that has them.
	Added, Removed []string
	// Moved counts the queued requests of removed classes, resolved again
	// into a class of the new policy.
	Moved int
	// Reordered counts the queued requests whose order was computed again
	// because their class's queue_policy changed or they moved.
	Reordered int
}

// SetPolicy replaces the policy at now, between two arbitration calls
// (docs/design.md, Live policy). p must be valid (configs.Parse). Classes are
// matched by name:
//
//   - a class kept keeps its queue (every lane, blocked or not), its DRR
//     deficit, and the carry or the ring cursor when it has them; its quantum,
//     gate, limits and queue policy become the new ones (a changed
//     queue_policy re-orders its queue);
//   - a removed class's queued requests are resolved again (docs/design.md,
//     Class resolution) from their subject token and uncached tokens, and
//     queued in their new class as they are: not charged again (a request
//     already charged stays charged), without a limit check, and keeping
//     their deadline and pin;
//   - a new class starts empty with a zero deficit;
//   - key weights (the key level) change in place: a key of a kept class
//     keeps the service it has received, and is charged with its new weight
//     from now on; dispatches awaiting settlement keep their class, or, when
//     it was removed, are owed nothing.
//
// Requests in flight at a worker are the caller's: it gives each of them its
// new class with Reclass. Every blocked lane is re-checked, since the gates
// changed. now is the time of the change; the class level does not use it.
//
// Cost: O(classes × workers' ranks) for the gates, plus O(m log n) for the m
// queued requests moved or re-ordered, plus O(q) to re-index the q queued
// requests of kept classes whose index changed.
func (s *Scheduler) SetPolicy(now int64, p *configs.Policy) PolicyChange {
	old := s.pol
	ch := PolicyChange{To: make([]int, len(old.Classes))}
	from := make([]int, len(p.Classes))
	for k := range from {
		from[k] = -1
	}
	for i, c := range old.Classes {
		k := p.Index(c.Name)
		ch.To[i] = k
		if k < 0 {
			ch.Removed = append(ch.Removed, c.Name)
			continue
		}
		from[k] = i
	}

	// Take the queued requests of removed classes out.
	var moved []*request.Snapshot
	for i, k := range ch.To {
		if k >= 0 {
			continue
		}
		c, start := s.classes[i], len(moved)
		c.Each(func(r *request.Snapshot) bool {
			moved = append(moved, r)
			return true
		})
		for _, r := range moved[start:] {
			c.Remove(r)
		}
	}

	classes := make([]*lanes.Keyed, len(p.Classes))
	queues := make([]drr.Queue, len(p.Classes))
	oldShed := s.shed
	s.pol = p
	s.indexBudgets()
	s.indexShed(now, oldShed, from)
	for k := range p.Classes {
		c := &p.Classes[k]
		f := from[k]
		if f < 0 {
			ch.Added = append(ch.Added, c.Name)
			classes[k] = lanes.NewKeyed(checker{s}, s.keyConfig(k))
		} else {
			classes[k] = s.classes[f]
			classes[k].SetNow(now)
			classes[k].SetKeyConfig(s.keyConfig(k))
		}
		queues[k] = classes[k]
	}
	s.settle.reclass(ch.To)
	quanta, gates := classParams(p)
	s.pol, s.classes, s.queues = p, classes, queues
	s.arb.Reconfigure(quanta, from)
	s.gates = filters.NewGates(s.reg, gates)
	for _, w := range s.reg.All() {
		s.gates.Update(w)
	}

	// Kept classes: the new index, and the new order if queue_policy or
	// min_share changed (keeping every key's standing: lanes.Reorder).
	reordered := 0
	for k, f := range from {
		if f < 0 {
			continue
		}
		c := classes[k]
		changed := old.Classes[f].Queue != p.Classes[k].Queue || !maps.Equal(old.Classes[f].MinShare, p.Classes[k].MinShare)
		switch {
		case changed:
			reordered += c.Reorder(func(r *request.Snapshot) { r.Class = k; s.order(r) })
		case f != k:
			c.Each(func(r *request.Snapshot) bool { r.Class = k; return true })
		}
	}
	for _, r := range moved {
		s.reclass(r, ch)
		classes[r.Class].Push(r)
	}
	ch.Moved, ch.Reordered = len(moved), reordered+len(moved)
	for k, st := range s.shed {
		if st != nil { // count what the class holds now
			*st.tally = *newDueTally(now)
			classes[k].Each(func(r *request.Snapshot) bool { st.tally.Add(r); return true })
		}
	}
	s.configurePreemption(ch.To)
	s.recheckAll()
	return ch
}

// Reclass gives r, a request of the policy before the change ch that is not
// queued (in flight at a worker, or being dead-lettered), its class under the
// policy in force: its class's new index, or, when its class was removed, the
// class its token resolves to now; its order is computed again for that
// class's queue policy, so that it keeps a consistent place if it is handed
// back. A request without a class (Class < 0) is left alone. Call it once per
// request per change, right after SetPolicy. O(log buckets).
func (s *Scheduler) Reclass(r *request.Snapshot, ch PolicyChange) {
	if r == nil || r.Class < 0 || r.Class >= len(ch.To) {
		return
	}
	s.reclass(r, ch)
}

func (s *Scheduler) reclass(r *request.Snapshot, ch PolicyChange) {
	if k := ch.To[r.Class]; k >= 0 {
		r.Class = k
	} else {
		r.Class = s.pol.Resolve(r.Token, r.Uncached())
		// The budget it paid was its removed class's: the new class's
		// budget took nothing, so its settlement has nothing there to correct.
		r.BudgetPaid = false
	}
	s.order(r)
}
