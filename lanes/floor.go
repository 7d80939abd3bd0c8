package lanes

import (
	"sort"

	"fairdispatch/request"
)

// floor is one strict tier with a floor share within one key
// (docs/design.md, Tier floors): the key's unpinned requests of that tier,
// held apart from its shared lane, and the service the tier is owed.
//
// The tier is owed credit: every dispatch of the key, of any tier, adds
// share × cost while the tier is backlogged, and a dispatch of the tier takes
// its cost. While the credit is positive the tier's head goes before the
// key's higher tiers; otherwise strict order decides as usual. So over any
// time the tier stays backlogged it gets at least share of the key's cost
// served, less one request's cost.
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
			best = h
		}
	}
	return best
}

// chargeFloors accounts a dispatch of r (cost) from key k: every backlogged
// floor is owed share × cost, r's own floor pays cost; a floor's credit is
// kept within one cost below zero (a tier served by strict order alone
// earns no debt), and an empty floor keeps no credit.
func chargeFloors(k *key, r *request.Snapshot, from *floor, cost float64) {
	for i := range k.x.floors {
		f := &k.x.floors[i]
		if len(f.q) == 0 && f != from {
			f.credit = min(f.credit, 0)
			continue
		}
		f.credit += f.share * cost
		if f == from {
			f.credit -= cost
		}
		f.credit = max(f.credit, -cost)
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
