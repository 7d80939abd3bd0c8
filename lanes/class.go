package lanes

import "fairdispatch/request"

// Checker says whether a lane head may be dispatched now (docs/design.md, Lanes; docs/design.md, Gates): for
// the scheduler, whether the request's class is not gated for it.
type Checker interface {
	Dispatchable(r *request.Snapshot) bool
}

// lane is one heap of requests: the shared lane, or a pinned target's.
type lane struct {
	target  request.Target
	q       queue
	pos     int  // position in Class.ready, -1 when not indexed
	blocked bool // in Class.blocked
	owner   *key // the key whose lane it is, in a Keyed class; nil in a Class
}

// Class is one physical policy class's queue. It implements drr.Queue.
type Class struct {
	check   Checker
	shared  lane
	pinned  map[request.Target]*lane
	ready   index              // pinned lanes whose heads are not known to be blocked
	blocked map[string][]*lane // pinned lanes with a blocked head, by worker id
	free    []*lane            // empty lanes kept for reuse

	n           int
	isl, cached uint64

	cand, last *request.Snapshot // the last Candidate, and the last popped request
}

// New returns an empty class whose heads are checked with check.
func New(check Checker) *Class {
	return &Class{
		check:   check,
		shared:  lane{pos: -1},
		pinned:  make(map[request.Target]*lane),
		blocked: make(map[string][]*lane),
	}
}

// Len returns the number of queued requests.
func (c *Class) Len() int { return c.n }

// Empty reports whether the class holds no request.
func (c *Class) Empty() bool { return c.n == 0 }

// Tokens returns the queued requests' total raw ISL and cached tokens.
func (c *Class) Tokens() (isl, cached uint64) { return c.isl, c.cached }

// Lanes returns the number of pinned lanes, and how many of them are blocked.
func (c *Class) Lanes() (pinned, blocked int) {
	for _, ls := range c.blocked {
		blocked += len(ls)
	}
	return len(c.pinned), blocked
}

// Push queues r in its lane: the shared lane, or its pin's. O(log n).
func (c *Class) Push(r *request.Snapshot) {
	c.n++
	c.isl += r.ISL
	c.cached += r.Cached
	if !r.Pin.Pinned() {
		c.shared.q.Push(r)
		return
	}
	l := c.pinned[r.Pin]
	if l == nil {
		l = c.newLane(r.Pin)
	}
	l.q.Push(r)
	switch {
	case l.blocked && r.Index == 0:
		// A new head may be dispatchable where the old one was not.
		c.unblock(l)
	case l.pos >= 0:
		c.ready.Fix(l.pos)
	case !l.blocked:
		c.ready.Push(l)
	}
}

// Remove takes r out of the class wherever it waits (an expired deadline). O(log n).
func (c *Class) Remove(r *request.Snapshot) {
	if r.Index < 0 {
		return
	}
	if c.cand == r {
		c.cand = nil
	}
	if !r.Pin.Pinned() {
		c.shared.q.Remove(r.Index)
	} else {
		l := c.pinned[r.Pin]
		l.q.Remove(r.Index)
		c.settle(l)
	}
	c.n--
	c.isl -= r.ISL
	c.cached -= r.Cached
}

// Candidate returns the DRR cost of the class candidate (docs/design.md, Lanes): the shared
// head if dispatchable, or the best dispatchable pinned head, whichever ranks
// higher. Indexed heads found blocked move to the blocked set on the way.
// Cost: O(1) checks for the shared head, plus O(log L) per lane moved aside.
func (c *Class) Candidate() (uint64, bool) {
	c.cand = nil
	if len(c.shared.q) > 0 && c.check.Dispatchable(c.shared.q[0]) {
		c.cand = c.shared.q[0]
	}
	for len(c.ready) > 0 {
		l := c.ready[0]
		h := l.q[0]
		if c.cand != nil && c.cand.Before(h) {
			break // the shared head outranks every pinned head
		}
		if c.check.Dispatchable(h) {
			c.cand = h
			break
		}
		c.ready.Remove(0)
		l.blocked = true
		c.blocked[l.target.Worker] = append(c.blocked[l.target.Worker], l)
	}
	if c.cand == nil {
		return 0, false
	}
	return c.cand.DRRCost(), true
}

// Pop removes the candidate found by the last Candidate call; Last returns it.
func (c *Class) Pop() {
	r := c.cand
	c.cand = nil
	c.Remove(r)
	c.last = r
}

// Last returns the request removed by the last Pop.
func (c *Class) Last() *request.Snapshot { return c.last }

// Recheck returns the blocked lanes of worker id to the index: its state changed.
// O(k log L) for k lanes.
func (c *Class) Recheck(id string) {
	ls := c.blocked[id]
	if len(ls) == 0 {
		return
	}
	delete(c.blocked, id)
	for _, l := range ls {
		l.blocked = false
		c.ready.Push(l)
	}
}

// RecheckAll returns every blocked lane to the index.
func (c *Class) RecheckAll() {
	for id := range c.blocked {
		c.Recheck(id)
	}
}

// Each calls fn for every queued request, in no particular order, until fn returns false.
func (c *Class) Each(fn func(*request.Snapshot) bool) {
	for _, r := range c.shared.q {
		if !fn(r) {
			return
		}
	}
	for _, l := range c.pinned {
		for _, r := range l.q {
			if !fn(r) {
				return
			}
		}
	}
}

func (c *Class) newLane(t request.Target) *lane {
	var l *lane
	if n := len(c.free); n > 0 {
		l = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		l = &lane{}
	}
	l.target, l.pos, l.blocked = t, -1, false
	c.pinned[t] = l
	return l
}

// settle updates l's place after its head changed, and drops it when empty.
func (c *Class) settle(l *lane) {
	if len(l.q) > 0 {
		if l.pos >= 0 {
			c.ready.Fix(l.pos)
		}
		return
	}
	if l.pos >= 0 {
		c.ready.Remove(l.pos)
	}
	if l.blocked {
		c.dropBlocked(l)
	}
	delete(c.pinned, l.target)
	c.free = append(c.free, l)
}

func (c *Class) unblock(l *lane) {
	c.dropBlocked(l)
	c.ready.Push(l)
}

// dropBlocked takes l out of the blocked set.
func (c *Class) dropBlocked(l *lane) {
	ls := c.blocked[l.target.Worker]
	for i, x := range ls {
		if x == l {
			ls[i] = ls[len(ls)-1]
			ls[len(ls)-1] = nil
			ls = ls[:len(ls)-1]
			break
		}
	}
	if len(ls) == 0 {
		delete(c.blocked, l.target.Worker)
	} else {
		c.blocked[l.target.Worker] = ls
	}
	l.blocked = false
}
