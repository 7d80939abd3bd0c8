package lanes

import (
	"fairdispatch/request"
)

// The key level's choice of the class candidate, its dispatch and its
// settlement (docs/design.md, Fairness keys, Cost settlement).

// Candidate returns the DRR cost of the class candidate (docs/design.md, Fairness
// keys): among the keys with a dispatchable request, the one with the least
// normalized service supplies its best dispatchable request. Keys found with
// nothing dispatchable leave the key heap, keeping their service.
// Cost: one Checker call for the gated keys, plus per key examined the calls of
// the lanes' Candidate and O(log K) when it leaves the heap.
func (c *Keyed) Candidate() (uint64, bool) {
	c.cand, c.candKey, c.candFree, c.candOwed = nil, nil, false, false
	if len(c.throttled) > 0 {
		c.unthrottle()
	}
	if len(c.gated) > 0 && c.check.Dispatchable(c.gated[0].shared[0]) {
		// The class gate opened: every unconstrained shared head may go again.
		for len(c.gated) > 0 {
			k := c.gated[len(c.gated)-1]
			c.openShared(k)
			c.enter(k)
		}
	}
	if len(c.floorBlocked) > 0 && c.floorsOpen(c.floorBlocked[0]) {
		c.reopenFloors()
	}
	for len(c.keys) > 0 {
		k := c.keys[0].k
		if r := c.keyCandidate(k); r != nil {
			if b := k.budget(); b != nil && b.levelAt(c.now) < b.needFor(r.DRRCost()) {
				c.keys.Remove(0)
				c.throttle(k, r.DRRCost()) // over budget: it waits, others go on
				continue
			}
			c.cand, c.candKey = r, k
			return r.DRRCost(), true
		}
		c.keys.Remove(0)
		if k.x != nil && k.x.floors != nil && !k.fblk && floorsQueued(k) {
			k.fblk = true
			c.floorBlocked = append(c.floorBlocked, k)
		}
	}
	if c.conserve && c.conserveCandidate() {
		return c.cand.DRRCost(), true
	}
	return 0, false
}

// keyCandidate returns k's best dispatchable request, or nil; lanes found
// blocked are set aside on the way.
func (c *Keyed) keyCandidate(k *key) *request.Snapshot {
	var best *request.Snapshot
	if len(k.shared) > 0 && k.sblock == sOpen {
		h := k.shared[0]
		if c.check.Dispatchable(h) {
			best = h
		} else if h.Constrained() {
			k.sblock, k.spos = sBlocked, int32(len(c.sblocked))
			c.sblocked = append(c.sblocked, k)
		} else {
			k.sblock, k.spos = sGated, int32(len(c.gated))
			c.gated = append(c.gated, k)
		}
	}
	for len(k.ready) > 0 {
		l := k.ready[0]
		h := l.q[0]
		if best != nil && best.Before(h) {
			break
		}
		if c.check.Dispatchable(h) {
			best = h
			break
		}
		k.ready.Remove(0)
		l.blocked = true
		c.blocked[l.target.Worker] = append(c.blocked[l.target.Worker], l)
	}
	if k.x != nil && k.x.floors != nil {
		best = c.floorCandidate(k, best)
	}
	return best
}

// Pop removes the candidate found by the last Candidate call and charges its
// key cost / weight. A request's first charge makes its key owed a settlement
// (kept in memory) until [Keyed.Settle] or [Keyed.Release].
func (c *Keyed) Pop() {
	r, k := c.cand, c.candKey
	cost := r.DRRCost()
	if k.x != nil && k.x.floors != nil {
		// Before the removal: a floor that r empties pays r's cost out of
		// its credit first, and only then forfeits what is left.
		chargeFloors(k, r, inFloor(k, r), float64(r.Cost), c.candOwed)
	}
	c.remove(k, r)
	if b := k.budget(); b != nil && !c.candFree {
		b.charge(c.now, float64(cost))
		c.charged += float64(cost)
	}
	c.lastFree = c.candFree
	if c.candFree {
		c.reexamine(k) // its next request may be within its budget
	}
	c.vnow = max(c.vnow, k.v) // the v at which k was served
	c.setV(k, k.v+float64(cost)/k.weight)
	if cost > 0 {
		k.owed++
	}
	c.leave(k)
	c.last = r
}

// setV sets k's normalized service, and its place in the key heap.
func (c *Keyed) setV(k *key, v float64) {
	k.v = v
	if k.pos >= 0 {
		c.keys[k.pos].v = v
		c.keys.Fix(int(k.pos))
	}
}

// Last returns the request removed by the last Pop.
func (c *Keyed) Last() *request.Snapshot { return c.last }

// LastFree reports whether the last Pop served a key over its budget in the
// work-conserving pass (SetConserve), so that its budget was not charged.
func (c *Keyed) LastFree() bool { return c.lastFree }

// Settle applies a settlement correction of delta cost units (actual minus
// charged) to key name's service and releases one debt of the key
// (docs/design.md, Cost settlement). It returns false when the key is not
// tracked (nothing was owed). O(log K).
func (c *Keyed) Settle(name string, delta int64) bool {
	k := c.byName[name]
	if k == nil {
		return false
	}
	c.setV(k, k.v+float64(delta)/k.weight)
	if k.owed > 0 {
		k.owed--
	}
	c.maybeForget(k)
	return true
}

// Release drops one debt of key name without a correction (the record expired,
// or the dispatch failed). O(log K).
func (c *Keyed) Release(name string) { c.Settle(name, 0) }
