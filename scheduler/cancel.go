package scheduler

import "fairdispatch/request"

// Cancel takes a queued request out of the scheduler because its producer
// cancelled it (docs/protocol.md, Cancellation), with no service charged: a
// request that paid its cost at arbitration before a refused dispatch handed
// it back gets it refunded, on its fairness key's service, its class's
// deficit and its key's token budget if it took from one (with the key's
// debt for that dispatch released), as if it had never been served; one
// never charged changes nothing but the queue. It
// reports whether r was queued; a request not queued (in a handshake,
// dispatched, or unknown) is left alone. O(log n + log L + log K) as
// lanes.Keyed.Remove.
func (s *Scheduler) Cancel(r *request.Snapshot) bool {
	if r == nil || r.Index < 0 {
		return false
	}
	removeDeadline(&s.dl, r)
	c := s.classes[r.Class]
	if r.Paid {
		refund := -int64(min(r.Cost, 1<<62))
		// While r is queued its key is tracked, so Settle finds it; Settle
		// releases the key's debt for the dispatch r paid, so Remove must not.
		c.Settle(r.Key, refund)
		s.arb.Charge(r.Class, refund)
		if r.BudgetPaid {
			c.ChargeBudget(s.now, r.Key, refund)
			r.BudgetPaid = false
		}
		r.Paid = false
		r.Charged = false
	}
	c.Remove(r)
	return true
}
