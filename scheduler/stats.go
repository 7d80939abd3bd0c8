package scheduler

import (
	"fairdispatch/lanes"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

// What the scheduler shows: queue lengths, class and key stats.

// Queued returns the number of requests queued in class k.
func (s *Scheduler) Queued(k int) int { return s.classes[k].Len() }

// Class returns class k's queue, for reading (keys and their service).
func (s *Scheduler) Class(k int) *lanes.Keyed { return s.classes[k] }

// satMul multiplies without wrapping.
func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}

// TopKeys is how many keys per class wire.ClassStats lists.
const TopKeys = 10

// topKeys returns class c's TopKeys keys with the most queued requests. O(K).
func topKeys(c *lanes.Keyed) []wire.KeyStats {
	var top []wire.KeyStats
	vt := c.VirtualTime()
	c.EachKey(func(name string, service, weight float64, queued int) bool {
		if len(top) == TopKeys && queued <= top[len(top)-1].Queued {
			return true
		}
		ks := wire.KeyStats{Key: name, Queued: queued, Weight: weight, Lead: service - vt}
		i := len(top)
		if i < TopKeys {
			top = append(top, ks)
		} else {
			i--
		}
		for ; i > 0 && (top[i-1].Queued < queued || top[i-1].Queued == queued && top[i-1].Key > name); i-- {
			top[i] = top[i-1]
		}
		top[i] = ks
		return true
	})
	return top
}

// Stats appends every class's stats to dst, in ring order. O(C + pinned lanes +
// tracked keys).
func (s *Scheduler) Stats(dst []wire.ClassStats) []wire.ClassStats {
	for k, c := range s.classes {
		isl, cached := c.Tokens()
		pinned, blocked := c.Lanes()
		cs := wire.ClassStats{
			Name: s.pol.Classes[k].Name, Pending: c.Len(), ISLTokens: isl, CachedTokens: cached,
			Deficit: s.arb.Deficit(k), Keys: c.Keys(), TopKeys: topKeys(c), PinnedLanes: pinned, BlockedLanes: blocked, FreeRanks: s.gates.Free(k),
		}
		s.extensionStats(k, &cs)
		dst = append(dst, cs)
	}
	return dst
}

// Overloaded reports whether worker w is overloaded under the thresholds in force.
func (s *Scheduler) Overloaded(w *workers.Worker) bool { return s.sel.Thresholds.Overloaded(w) }
