package lanes

import (
	"cmp"
	"slices"

	"fairdispatch/request"
)

// KeyState is one tracked fairness key of a [Keyed] class as [Keyed.Inspect]
// reports it: what the key-level rules of docs/design.md, Fairness keys read.
type KeyState struct {
	Name   string
	Weight float64
	// Service is the key's normalized service v: cost charged divided by the
	// weight, plus settlement corrections.
	Service float64
	Queued  int
	// Owed counts the key's charged dispatches not yet settled or released
	// (docs/design.md, Cost settlement): an idle key is kept while it is owed.
	Owed int
	// Ready is set when the key is in the key heap: it has a lane not known
	// to be blocked. A backlogged key that is not Ready was set aside with its
	// standing kept.
	Ready bool
	// Shared is the key's shared lane in dispatch order (head first).
	Shared []*request.Snapshot
	// SharedHeld says why the shared head is set aside: "" (it is not),
	// "gated" (an unconstrained head the class gate refused) or "blocked" (a
	// constrained head no eligible rank could take).
	SharedHeld string
	// Pinned are the key's pinned lanes, by worker id, then rank (AnyRank
	// first).
	Pinned []LaneState
}

// LaneState is one pinned lane of a key.
type LaneState struct {
	Target request.Target
	// Requests are the lane's requests in dispatch order (head first).
	Requests []*request.Snapshot
	// Blocked is set while the lane is in the blocked set (its head was found
	// not dispatchable and no recheck has returned it yet).
	Blocked bool
}

// Inspect returns every tracked key of the class, by name, with its lanes,
// each in dispatch order: a copy for tests and debugging (the scheduler's
// scenario dump, docs/design.md, Scenario files), never for the dispatch
// path. O(n log n) for n queued requests; it allocates.
func (c *Keyed) Inspect() []KeyState {
	out := make([]KeyState, 0, len(c.byName))
	for _, k := range c.byName {
		ks := KeyState{
			Name: k.name, Weight: k.weight, Service: k.v, Queued: int(k.n), Owed: int(k.owed),
			Ready: k.pos >= 0, Shared: inOrder(k.shared),
		}
		switch k.sblock {
		case sGated:
			ks.SharedHeld = "gated"
		case sBlocked:
			ks.SharedHeld = "blocked"
		}
		out = append(out, ks)
	}
	slices.SortFunc(out, func(a, b KeyState) int { return cmp.Compare(a.Name, b.Name) })
	for kt, l := range c.pinned {
		i, _ := slices.BinarySearchFunc(out, kt.key, func(ks KeyState, name string) int { return cmp.Compare(ks.Name, name) })
		out[i].Pinned = append(out[i].Pinned, LaneState{Target: l.target, Requests: inOrder(l.q), Blocked: l.blocked})
	}
	for i := range out {
		slices.SortFunc(out[i].Pinned, func(a, b LaneState) int {
			return cmp.Or(cmp.Compare(a.Target.Worker, b.Target.Worker), cmp.Compare(a.Target.Rank, b.Target.Rank))
		})
	}
	return out
}

// inOrder returns a copy of q's requests sorted by [request.Snapshot.Before].
func inOrder(q queue) []*request.Snapshot {
	if len(q) == 0 {
		return nil
	}
	rs := slices.Clone(q)
	slices.SortFunc(rs, request.Compare)
	return rs
}
