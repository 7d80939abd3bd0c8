package scheduler

import (
	"fmt"
	"math"

	"fairdispatch/request"
)

// Arbitration and selection (docs/design.md, DRR, Worker selection), and
// the answers to a dispatch (docs/protocol.md, Dispatch handshake).

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
	if len(s.dl) > 0 && s.dl[0].Deadline <= now {
		// Due since the last tick: it expires, and is never dispatched
		// after its deadline (docs/design.md, Deadlines).
		r := s.dl[0]
		removeDeadline(&s.dl, r)
		s.classes[r.Class].Remove(r)
		return s.expire(now, r)
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
		if r.Paid {
			s.settle.record(now, d, r.Cost, true)
		} else {
			// Placed at arrival and refused: never arbitrated, never
			// charged, so its completion has nothing to correct.
			s.settle.record(now, d, 0, false)
		}
		if s.budgeted != nil && c.Budgeted() {
			if cost > 0 && !c.LastFree() {
				r.BudgetPaid = true // charged to the budget just now
			}
			if r.BudgetPaid {
				s.settle.budgeted(d, r.Cost)
			}
		}
	case Reject:
		if r.Paid {
			s.classes[k].Release(r.Key) // nothing will complete: the key owes no settlement
		}
		if s.budgeted != nil && c.Budgeted() && cost > 0 && !c.LastFree() {
			c.ChargeBudget(now, r.Key, -int64(min(cost, math.MaxInt64/4))) // nothing ran: the budget gets back what Pop took
		}
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
