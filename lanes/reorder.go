package lanes

import (
	"cmp"
	"slices"

	"fairdispatch/request"
)

// Reorder takes every queued request out, lets order set its place again
// (its Score, Due, class: a live change of queue_policy or min_share,
// docs/design.md, Live policy) and puts it back, keeping what each key has
// earned: its normalized service and its place among equals, the
// dispatches it is owed settlements for, its key fairness window marks, and
// the credit of each tier that keeps a floor, at the floor's new share. It
// returns the number of requests put back. O(queued × log queued).
func (c *Keyed) Reorder(order func(*request.Snapshot)) int {
	var rs []*request.Snapshot
	c.Each(func(r *request.Snapshot) bool { rs = append(rs, r); return true })
	if len(rs) == 0 {
		return 0
	}
	type standing struct {
		v       float64
		order   uint64
		owed    int32
		mark    [2]float64
		credits map[uint32]float64
	}
	kept := make(map[string]standing, len(c.byName))
	for name, k := range c.byName {
		st := standing{v: k.v, order: k.order, owed: k.owed, mark: k.mark}
		if k.x != nil && len(k.x.floors) > 0 {
			st.credits = make(map[uint32]float64, len(k.x.floors))
			for _, f := range k.x.floors {
				st.credits[f.tier] = f.credit
			}
		}
		kept[name] = st
	}
	for _, r := range rs {
		c.Remove(r)
	}
	for _, k := range c.byName {
		if k.x != nil {
			k.x.floors = nil // empty now: made again at the new shares
		}
	}
	// The overflow key's requests last: pushed first, it could take the slot
	// of a key it never replaced, which would then overflow (MaxKeys).
	slices.SortStableFunc(rs, func(a, b *request.Snapshot) int {
		return cmp.Compare(btoi(a.Key == OverflowKey), btoi(b.Key == OverflowKey))
	})
	for _, r := range rs {
		order(r)
		c.Push(r)
	}
	for name, st := range kept {
		k := c.byName[name]
		if k == nil {
			continue
		}
		k.v, k.order, k.owed, k.mark = st.v, st.order, st.owed, st.mark
		if k.x != nil {
			for i := range k.x.floors {
				if cr, ok := st.credits[k.x.floors[i].tier]; ok {
					k.x.floors[i].credit = cr
				}
			}
		}
		if k.pos >= 0 {
			c.keys[k.pos] = keyEntry{k.v, k.order, k}
			c.keys.Fix(int(k.pos))
		}
	}
	return len(rs)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
