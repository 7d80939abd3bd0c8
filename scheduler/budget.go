package scheduler

import (
	"fmt"

	"fairdispatch/configs"
	"fairdispatch/lanes"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// lanesBudget converts a policy budget.
func lanesBudget(b *configs.Budget) *lanes.Budget {
	if b == nil {
		return nil
	}
	return &lanes.Budget{Rate: b.Rate, Burst: b.Burst, WorkConserving: b.WorkConserving}
}

// budgetConfig fills cfg's budgets from class c.
func budgetConfig(c *configs.Class, cfg *lanes.KeyConfig) {
	if !c.Budgeted() {
		return
	}
	cfg.DefaultBudget = lanesBudget(c.DefaultKeyBudget)
	cfg.Budgets = make(map[string]*lanes.Budget, len(c.KeyBudgets))
	for k, b := range c.KeyBudgets {
		cfg.Budgets[k] = lanesBudget(b)
	}
}

// indexBudgets lists the classes with budgets (Scheduler.budgeted).
func (s *Scheduler) indexBudgets() {
	s.budgeted = s.budgeted[:0]
	for k := range s.pol.Classes {
		if s.pol.Classes[k].Budgeted() {
			s.budgeted = append(s.budgeted, k)
		}
	}
}

// arbitrate runs one DRR call at now. Classes with budgets learn the time
// first; when nothing is dispatchable and a key over a work-conserving
// budget waits, a second call lets such keys be served (docs/design.md,
// Token budgets). A class with no budget pays one length check.
func (s *Scheduler) arbitrate(now int64) (int, bool) {
	for _, k := range s.budgeted {
		s.classes[k].SetNow(now)
	}
	k, ok := s.arb.Next(s.queues)
	if ok || len(s.budgeted) == 0 {
		return k, ok
	}
	on := false
	for _, j := range s.budgeted {
		if c := s.classes[j]; c.Conserving() {
			c.SetConserve(true)
			on = true
		}
	}
	if !on {
		return k, ok
	}
	k, ok = s.arb.Next(s.queues)
	for _, j := range s.budgeted {
		s.classes[j].SetConserve(false)
	}
	return k, ok
}

// NextWake returns the earliest time (Unix ns) at which the scheduler has
// something to do without an event: a queued request's deadline, or a key
// over its budget becoming servable again; 0 when none. A caller with its
// own regular tick need not use it; a virtual-time harness does.
func (s *Scheduler) NextWake() int64 {
	t := s.NextDeadline()
	for _, k := range s.budgeted {
		if r := s.classes[k].NextReady(); r > 0 && (t == 0 || r < t) {
			t = r
		}
	}
	return t
}

// checkBudget rejects r at admission as budget_exceeded when it has a
// deadline and its key's budget alone would keep it waiting past it (a
// work-conserving budget never rejects: spare capacity may serve it). The
// error's RetryAfter is how long until the same request would fit in its
// deadline, Projected the wait projected now.
func (s *Scheduler) checkBudget(now int64, r *request.Snapshot) *Error {
	if r.Deadline == 0 || !s.pol.Classes[r.Class].Budgeted() {
		return nil
	}
	wait, conserving, ok := s.classes[r.Class].BudgetWait(now, r.Key, r.Cost)
	if !ok || conserving || now+wait <= r.Deadline {
		return nil
	}
	left := max(0, r.Deadline-now)
	return &Error{Code: request.BudgetExceeded, Projected: wait, RetryAfter: wait - left,
		Message: fmt.Sprintf("fairness key %q would wait %d ms for its token budget, past its deadline in %d ms",
			r.Key, wait/1e6, left/1e6)}
}

// extensionStats fills the budget and shedding parts of class k's stats
// (wire.ClassStats.ThrottledKeys, DrainRate, KeyStats.Budget), at the
// latest now the scheduler saw. O(top keys).
func (s *Scheduler) extensionStats(k int, cs *wire.ClassStats) {
	c := s.classes[k]
	if c.Budgeted() {
		n, charged := c.Throttled(), c.BudgetCharged()
		cs.ThrottledKeys, cs.BudgetCharged = &n, &charged
		for i := range cs.TopKeys {
			ks := &cs.TopKeys[i]
			if level, rate, burst, thr, ok := c.BudgetLevel(s.now, ks.Key); ok {
				ks.Budget = &wire.KeyBudget{TokensPerSecond: rate, Burst: burst, Level: level, Throttled: thr}
			}
		}
	}
	if s.pre.on && s.pre.sheddable[k] {
		n := s.pre.asked[s.pol.Classes[k].Name]
		cs.Preempted = &n
	}
	if st := s.shed[k]; st != nil {
		if r, ok := st.drain.rate(); ok {
			r *= 1e9
			cs.DrainRate = &r
		}
	}
}
