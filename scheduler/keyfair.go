package scheduler

import (
	"math"

	"fairdispatch/wire"
)

// DefaultKeyWindowStep is how often, in nanoseconds, the key fairness window
// takes a new mark by default (Config.KeyWindowStep; docs/design.md, Key
// fairness window): the window measured reaches back to the older of the last
// two marks, so it covers between one and two steps (5 to 10 s) once the
// dispatcher has run for a step.
const DefaultKeyWindowStep = int64(5e9)

// keyWindow is the state of the key fairness window: when each of the two
// mark slots of every class was last marked, and which is the newer.
type keyWindow struct {
	step   int64
	at     [2]int64
	set    [2]bool
	newest int
}

// KeyFairness measures, for every class in stats (as Stats returned them, in
// ring order), the key fairness over the last window ending at now, and fills
// ClassStats.KeyFairness and the Share and WeightShare of its TopKeys. It
// takes a new mark when the last was taken Config.KeyWindowStep ago or more. The
// caller calls it about once a second (the dispatcher, with its /debug/queues
// snapshot). O(K) for K tracked keys; the dispatch path pays nothing.
func (s *Scheduler) KeyFairness(now int64, stats []wire.ClassStats) {
	w := &s.keyWin
	if !w.set[w.newest] || now-w.at[w.newest] >= w.step {
		slot := w.newest
		if w.set[slot] {
			slot = 1 - slot
		}
		for _, c := range s.classes {
			c.Mark(slot)
		}
		w.at[slot], w.set[slot], w.newest = now, true, slot
	}
	base := w.newest
	if w.set[1-base] {
		base = 1 - base // the older mark: the longer window
	}
	secs := float64(now-w.at[base]) / 1e9
	for k := range stats {
		if k >= len(s.classes) {
			break
		}
		stats[k].KeyFairness = s.keyFairness(k, base, secs, stats[k].TopKeys)
	}
}

func (s *Scheduler) keyFairness(k, slot int, secs float64, top []wire.KeyStats) *wire.KeyFairness {
	f := &wire.KeyFairness{WindowSeconds: secs}
	var sumX, sumX2, sumS, sumW float64
	type measured struct{ served, weight float64 }
	var tops [TopKeys]measured
	var inTop [TopKeys]bool
	// Share over weight share is (S_k / sum S) / (w_k / sum W) = x_k * sum W / sum S:
	// its extremes are those of x, the normalized service.
	minX, maxX := math.Inf(1), math.Inf(-1)
	s.classes[k].EachSince(slot, func(name string, gained, weight float64, _ int) bool {
		x := max(gained, 0) // a refund larger than the service in the window counts as none
		f.Keys++
		sumX += x
		sumX2 += x * x
		sumS += x * weight
		sumW += weight
		minX, maxX = min(minX, x), max(maxX, x)
		for i := range top {
			if top[i].Key == name {
				tops[i], inTop[i] = measured{x * weight, weight}, true
			}
		}
		return true
	})
	if f.Keys < 2 || sumS <= 0 {
		return f
	}
	jain := sumX * sumX / (float64(f.Keys) * sumX2)
	hi, lo := maxX*sumW/sumS, minX*sumW/sumS
	f.Jain, f.MaxShareOverWeight, f.MinShareOverWeight = &jain, &hi, &lo
	for i := range top {
		if inTop[i] {
			share, wshare := tops[i].served/sumS, tops[i].weight/sumW
			top[i].Share, top[i].WeightShare = &share, &wshare
		}
	}
	return f
}
