package filters

import (
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Gate is a class's queue gate (docs/design.md, Gates). A nil field is unset.
type Gate struct {
	Threshold *uint64  // prefill_busy_threshold, tokens
	Frac      *float64 // prefill_busy_threshold_frac of max_num_batched_tokens
	Ratio     *float64 // busy_worker_ratio in (0, 1]
}

// Busy reports whether rank rk of w is busy for a class with this gate: its
// prefill load is strictly above a threshold, or the worker is draining, or it
// is excluded after refusals, or the rank is at its capacity
// (max_active_requests, counting bookings). A class without a threshold finds
// a rank busy only for those last three reasons.
func (g *Gate) Busy(w *workers.Worker, rk *workers.Rank) bool {
	if w.Draining || w.Excluded || w.Full(rk) {
		return true
	}
	p := rk.Load().ActivePrefillTokens
	if g.Threshold != nil && p > *g.Threshold {
		return true
	}
	if g.Frac != nil && float64(p) > *g.Frac*float64(batched(w)) {
		return true
	}
	return false
}

// gated applies the gate's rule to busy of eligible ranks: no eligible rank is
// never gated; otherwise gated when none is free, or with a ratio, when
// busy >= ratio * eligible.
func (g *Gate) gated(busy, eligible int) bool {
	if eligible == 0 {
		return false
	}
	if g.Ratio != nil {
		return float64(busy) >= *g.Ratio*float64(eligible)
	}
	return busy == eligible
}

// Gates keeps, for every class, the number of live ranks busy for it, so that
// the gate of an unconstrained request costs O(1) (docs/design.md, DRR). Update must be
// called after every change to a worker's load or state, Remove when it goes.
//
// Update costs O(ranks × classes) of the worker; Gated O(1); GatedFor O(1) for
// an unconstrained request, O(ranks of its target) for a pin, and O(its
// allow-list, or every worker) for a constrained one. Not safe for concurrent use.
type Gates struct {
	gates []Gate
	ranks int   // live ranks
	busy  []int // per class
	bits  map[*workers.Worker][]bool
	reg   *workers.Registry
}

// NewGates returns a tracker for classes with these gates over reg's workers.
func NewGates(reg *workers.Registry, gates []Gate) *Gates {
	return &Gates{gates: gates, busy: make([]int, len(gates)), bits: make(map[*workers.Worker][]bool), reg: reg}
}

// Update recounts w's ranks.
func (g *Gates) Update(w *workers.Worker) {
	c := len(g.gates)
	b := g.bits[w]
	if len(b) != c*len(w.Ranks) {
		g.Remove(w)
		b = make([]bool, c*len(w.Ranks))
		g.bits[w] = b
		g.ranks += len(w.Ranks)
	}
	for i := range w.Ranks {
		rk := &w.Ranks[i]
		for k := range g.gates {
			now := g.gates[k].Busy(w, rk)
			j := i*c + k
			if now != b[j] {
				if now {
					g.busy[k]++
				} else {
					g.busy[k]--
				}
				b[j] = now
			}
		}
	}
}

// Remove forgets w.
func (g *Gates) Remove(w *workers.Worker) {
	b, ok := g.bits[w]
	if !ok {
		return
	}
	c := len(g.gates)
	for j, busy := range b {
		if busy {
			g.busy[j%c]--
		}
	}
	g.ranks -= len(b) / max(c, 1)
	delete(g.bits, w)
}

// Gated reports whether class k is gated for an unconstrained request.
func (g *Gates) Gated(k int) bool { return g.gates[k].gated(g.busy[k], g.ranks) }

// Free returns the number of live ranks not busy for class k.
func (g *Gates) Free(k int) int { return g.ranks - g.busy[k] }

// GatedFor reports whether class k is gated for request r (docs/design.md, Gates): a pinned
// request checks only its target; a constrained one its eligible ranks. A
// request with no eligible rank is not gated: it proceeds to selection and
// gets its error there.
func (g *Gates) GatedFor(k int, r *request.Snapshot) bool {
	gate := &g.gates[k]
	if r.Pin.Pinned() {
		w := g.reg.Get(r.Pin.Worker)
		if w == nil || !Eligible(w, r) {
			return false
		}
		if r.Pin.Rank != request.AnyRank {
			if !w.HasRank(r.Pin.Rank) {
				return false
			}
			return gate.gated(b2i(gate.Busy(w, w.Rank(r.Pin.Rank))), 1)
		}
		return gate.gated(busyRanks(gate, w), len(w.Ranks))
	}
	if !r.Constrained() {
		return g.Gated(k)
	}
	busy, eligible := 0, 0
	count := func(w *workers.Worker) {
		if w == nil || !Eligible(w, r) {
			return
		}
		eligible += len(w.Ranks)
		busy += busyRanks(gate, w)
	}
	if r.Route.Allowed != nil {
		for _, id := range r.Route.Allowed { // deduplicated at admission
			count(g.reg.Get(id))
		}
	} else {
		for _, w := range g.reg.All() {
			count(w)
		}
	}
	return gate.gated(busy, eligible)
}

func busyRanks(gate *Gate, w *workers.Worker) int {
	n := 0
	for i := range w.Ranks {
		n += b2i(gate.Busy(w, &w.Ranks[i]))
	}
	return n
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
