package scheduler

import "fairdispatch/request"

// preemptions remembers the requests the dispatcher preempted, so that
// when a preempted request comes back (its worker handed it back, and the
// stream delivered it again) it goes to the head of its lane, counted
// (docs/design.md, Preemption).
type preemptions struct {
	back map[string]uint8 // request id -> times preempted, until it comes back
}

func (p *preemptions) init() { p.back = map[string]uint8{} }

// readmit marks a request that comes back after a preemption.
func (p *preemptions) readmit(r *request.Snapshot) {
	if len(p.back) == 0 {
		return
	}
	if n, ok := p.back[r.ID]; ok {
		r.Preempted = n
		delete(p.back, r.ID)
	}
}
