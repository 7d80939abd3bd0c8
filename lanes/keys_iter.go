package lanes

import (
	"fairdispatch/request"
)

// Walks over a class's queued requests and keys, and the marks of the key
// fairness window (docs/design.md, Key fairness window).

// Each calls fn for every queued request, in no particular order, until fn returns false.
func (c *Keyed) Each(fn func(*request.Snapshot) bool) {
	for _, k := range c.byName {
		for _, r := range k.shared {
			if !fn(r) {
				return
			}
		}
		for i := range k.floorList() {
			for _, r := range k.x.floors[i].q {
				if !fn(r) {
					return
				}
			}
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

// EachKey calls fn for every tracked key with its normalized service, weight and
// queued requests, in no particular order, until fn returns false.
func (c *Keyed) EachKey(fn func(name string, service, weight float64, queued int) bool) {
	for _, k := range c.byName {
		if !fn(k.name, k.v, k.weight, int(k.n)) {
			return
		}
	}
}

// Mark starts a measurement window on slot (0 or 1; docs/design.md, Key
// fairness window): it records every backlogged key's normalized service, for
// [Keyed.EachSince]. O(K) for K tracked keys; nothing on the dispatch path.
func (c *Keyed) Mark(slot int) {
	for _, k := range c.byName {
		if k.n > 0 {
			k.mark[slot] = k.v
		}
	}
	c.markOrder[slot], c.marked[slot] = c.order, true
}

// EachSince calls fn, until fn returns false, for every key that has stayed
// backlogged since the last Mark(slot): gained is its normalized service
// gained since then (cost charged divided by its weight, plus settlement
// corrections). A key that became backlogged after the mark, even again, is
// left out: its service would count a lift to the virtual time, not service.
// Nothing is called before the first Mark(slot). O(K).
func (c *Keyed) EachSince(slot int, fn func(name string, gained, weight float64, queued int) bool) {
	if !c.marked[slot] {
		return
	}
	for _, k := range c.byName {
		if k.n > 0 && k.order <= c.markOrder[slot] {
			if !fn(k.name, k.v-k.mark[slot], k.weight, int(k.n)) {
				return
			}
		}
	}
}
