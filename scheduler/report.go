package scheduler

import (
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Load reports, time, thresholds and re-checks (docs/design.md, Load reports
// and the registry, When queues are re-checked, Fleet outage).

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
