package lanes

import (
	"sort"

	"fairdispatch/request"
)

// floor is one strict tier with a floor share within one key
// (docs/design.md, Tier floors): the key's unpinned requests of that tier,
// held apart from its shared lane, and the service the tier is owed.
//
// The tier is owed credit: every dispatch of a higher tier of the key adds
// share / (1 - share) × its cost while the tier is backlogged, and a
// dispatch of the tier takes its cost. While the credit is positive the
// tier's head goes before the key's higher tiers; otherwise strict order
// decides as usual. So over any time the tier stays backlogged under a
// higher tier it gets at least share of the key's cost served, less one
// request's cost.
type floor struct {
	tier   uint32
	share  float64
	q      queue
	credit float64
}

// floorFor returns k's floor for tier, creating it when the configuration
// gives the tier a share; nil when it gives none.
func (c *Keyed) floorFor(k *key, tier uint32) *floor {
	k.ext()
	for i := range k.x.floors {
		if k.x.floors[i].tier == tier {
			if _, ok := c.cfg.MinShare[tier]; !ok {
				return nil // removed by a policy change: new requests go to the shared lane
			}
			return &k.x.floors[i]
		}
	}
	share, ok := c.cfg.MinShare[tier]
	if !ok {
		return nil
	}
	k.x.floors = append(k.x.floors, floor{tier: tier, share: share})
	sort.Slice(k.x.floors, func(i, j int) bool { return k.x.floors[i].tier > k.x.floors[j].tier })
	for i := range k.x.floors {
		if k.x.floors[i].tier == tier {
			return &k.x.floors[i]
		}
	}
	return nil
}

// inFloor returns the floor of k holding r, or nil.
func inFloor(k *key, r *request.Snapshot) *floor {
	for i := range k.x.floors {
		f := &k.x.floors[i]
		if f.tier == r.Strict && r.Index < len(f.q) && f.q[r.Index] == r {
			return f
		}
	}
	return nil
}

// floorsQueued reports whether any floor of k holds a request.
func floorsQueued(k *key) bool {
	for i := range k.x.floors {
		if len(k.x.floors[i].q) > 0 {
			return true
		}
	}
	return false
}

// floorCandidate returns the better of best and k's floor heads: an owed
// tier's dispatchable head goes before any request of a higher tier; any
// other head competes by Before. Floor heads found not dispatchable are
// skipped (asked again at the next call: floors are few).
func (c *Keyed) floorCandidate(k *key, best *request.Snapshot) *request.Snapshot {
	for i := range k.x.floors {
		f := &k.x.floors[i]
		if len(f.q) == 0 {
			continue
		}
		h := f.q[0]
		owed := f.credit > 0 && best != nil && best.Strict > f.tier
		if best != nil && !owed && best.Before(h) {
			continue
		}
		if c.check.Dispatchable(h) {
			best, c.candOwed = h, owed
		}
	}
	return best
}

// chargeFloors accounts a dispatch of r (cost) from key k, out of floor
// from (nil: not a floor's): every backlogged floor of a lower tier than r's
// is owed share / (1 - share) × cost (the service it lost to a higher
// tier); r's own floor pays cost, down to one cost below zero when it went
// ahead of a higher tier (owed), down to zero otherwise. An empty floor
// keeps no credit.
func chargeFloors(k *key, r *request.Snapshot, from *floor, cost float64, owed bool) {
	for i := range k.x.floors {
		f := &k.x.floors[i]
		switch {
		case f == from && owed:
			f.credit -= cost
		case f == from:
			f.credit = max(0, f.credit-cost)
		case f.tier < r.Strict && len(f.q) > 0:
			f.credit += f.share / (1 - f.share) * cost
		}
		if len(f.q) == 0 {
			f.credit = min(f.credit, 0)
		}
	}
}

// floorsOpen reports whether a floor head of k is dispatchable now.
func (c *Keyed) floorsOpen(k *key) bool {
	for i := range k.x.floors {
		if q := k.x.floors[i].q; len(q) > 0 && c.check.Dispatchable(q[0]) {
			return true
		}
	}
	return false
}

// reopenFloors returns every key set aside with only floor heads to the key
// heap, to be examined again.
func (c *Keyed) reopenFloors() {
	for i, k := range c.floorBlocked {
		k.fblk = false
		c.floorBlocked[i] = nil
		c.enter(k)
	}
	c.floorBlocked = c.floorBlocked[:0]
}
