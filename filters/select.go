package filters

import (
	"math"
	"math/rand/v2"

	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Scoring holds the cost model's settings (docs/design.md, Worker selection).
type Scoring struct {
	BlockSize           float64 // tokens per block, > 0; default 16
	OverlapCredit       float64 // overlap_score_credit, default 1
	PrefillScale        float64 // prefill_load_scale, default 1
	DecodeRequestWeight float64 // decode_active_request_weight, default 0
	Temperature         float64 // router_temperature, >= 0; default 0
}

// DefaultScoring returns the defaults of docs/design.md, Worker selection.
func DefaultScoring() Scoring {
	return Scoring{BlockSize: 16, OverlapCredit: 1, PrefillScale: 1}
}

// Choice is a selected rank.
type Choice struct {
	Worker *workers.Worker
	Rank   int32
}

type candidate struct {
	w    *workers.Worker
	rank int32
	cost float64
}

// Selector picks a rank for a request (docs/design.md, Worker selection). It keeps scratch space,
// so Select does not allocate once warm. Not safe for concurrent use.
type Selector struct {
	Scoring    Scoring
	Thresholds Thresholds
	// KV is the KV cache index (docs/design.md, KV cache index); nil: none.
	// With an index, a request carrying block hashes is scored by each rank's
	// overlap computed at this moment, in place of Dispatch-Worker-Overlap.
	KV *kvindex.Index

	rand  *rand.Rand
	cands []candidate
	kv    kvindex.Overlaps // scratch: the overlaps of the request being placed
	useKV bool
	// index serves unconstrained requests without a scan (index.go); Scan
	// turns it off, for comparison.
	index index
	// Scan, when true, makes every request use the scan over all ranks.
	Scan bool
	// scanBelow: with fewer live workers, the scan is cheaper than keeping
	// the index up to date (BenchmarkSelect), and serves every request.
	scanBelow int
}

// scanBelowWorkers is the default of Selector.scanBelow.
const scanBelowWorkers = 16

// NewSelector returns a selector drawing its randomness (ties, temperature) from src.
func NewSelector(s Scoring, t Thresholds, src *rand.Rand) *Selector {
	return &Selector{Scoring: s, Thresholds: t, rand: src, scanBelow: scanBelowWorkers}
}

// Select returns the rank that request r goes to, or the code of why it can go
// nowhere. Pinned requests are checked in the order of docs/design.md, Worker selection: allow-list,
// then liveness, rank and taints, then overload.
//
// An unconstrained request (no pin, allow-list, taints or overlap, at
// temperature 0) is served by an index of the ranks by load, in O(log ranks)
// amortised per changed rank plus the ranks tied at the least cost: see
// docs/design.md, Worker selection index. Any other request scans, and so
// does every request while fewer than 16 workers are live.
func (s *Selector) Select(reg *workers.Registry, r *request.Snapshot) (Choice, request.Code) {
	s.useKV = s.KV != nil && r.Route != nil && r.Route.Hashes != nil // KVOverlap answers for this request, whichever path
	if !s.Scan && reg.Len() >= s.scanBelow && s.unconstrained(r) {
		return s.selectIndexed(reg, r)
	}
	s.cands = s.cands[:0]
	if s.useKV {
		s.KV.Overlap(r.Route.Hashes, &s.kv)
	}
	if r.Pin.Pinned() {
		if !r.Allowed(r.Pin.Worker) {
			return Choice{}, request.PinnedWorkerNotAllowed
		}
		w := reg.Get(r.Pin.Worker)
		if w == nil || !Eligible(w, r) || (r.Pin.Rank != request.AnyRank && !w.HasRank(r.Pin.Rank)) {
			return Choice{}, request.NoEndpoints
		}
		if s.Thresholds.Overloaded(w) {
			return Choice{}, request.PinnedWorkerOverloaded
		}
		if r.Pin.Rank != request.AnyRank {
			if w.Full(w.Rank(r.Pin.Rank)) {
				return Choice{}, request.PinnedWorkerOverloaded
			}
			return Choice{w, r.Pin.Rank}, ""
		}
		s.addRanks(w, r)
		return s.pick(), ""
	}
	eligible := false
	for _, w := range reg.All() {
		if !Eligible(w, r) {
			continue
		}
		eligible = true
		if s.Thresholds.Overloaded(w) {
			continue
		}
		s.addRanks(w, r)
	}
	switch {
	case !eligible:
		return Choice{}, request.NoEndpoints
	case len(s.cands) == 0:
		return Choice{}, request.AllWorkersOverloaded
	}
	return s.pick(), ""
}

// KVOverlap returns the index's overlap of rank c in the last Select, and
// whether the index scored that request (it carried block hashes and the
// selector has an index). Call it before the index changes.
func (s *Selector) KVOverlap(c Choice) (kvindex.Hit, bool) {
	if !s.useKV || c.Worker == nil {
		return kvindex.Hit{}, false
	}
	return s.kv.Of(c.Worker.ID, c.Rank), true
}

// addRanks scores every rank of w for r.
func (s *Selector) addRanks(w *workers.Worker, r *request.Snapshot) {
	sc := &s.Scoring
	isl := float64(r.ISL)
	reqBlocks := math.Ceil(isl / sc.BlockSize)
	credit := sc.OverlapCredit * float64(overlap(w.ID, r)) / sc.BlockSize
	factor := 1.0
	if r.Route != nil && len(r.Route.Preferred) > 0 {
		sum := 0.0
		for _, t := range r.Route.Preferred {
			if w.HasTaint(t.Name) {
				sum += t.Weight
			}
		}
		factor = math.Exp(-math.Tanh(sum))
	}
	for i := range w.Ranks {
		if w.Full(&w.Ranks[i]) {
			continue // at capacity: never a candidate
		}
		rank := int32(w.Start) + int32(i)
		if s.useKV {
			// The index's overlap is in blocks, weighted by tier.
			credit = sc.OverlapCredit * s.kv.Of(w.ID, rank).Weighted
		}
		s.cands = append(s.cands, candidate{w, rank, s.cost(w.Ranks[i].Load(), isl, reqBlocks, credit, factor)})
	}
}

// cost is the cost of a rank with load l (docs/design.md, Worker selection).
// The scan and the index both score with it, so that they agree to the bit.
func (s *Selector) cost(l workers.Load, isl, reqBlocks, credit, factor float64) float64 {
	sc := &s.Scoring
	prefill := (float64(l.ActivePrefillTokens)+isl)/sc.BlockSize - credit
	if prefill < 0 {
		prefill = 0
	}
	cost := sc.PrefillScale*prefill + float64(l.ActiveDecodeBlocks) +
		reqBlocks + sc.DecodeRequestWeight*float64(l.ActiveRequests)
	return cost * factor
}

// pick chooses among the scored candidates: the lowest cost at temperature 0
// (ties at random), else a softmax over -cost / (range * T).
func (s *Selector) pick() Choice {
	c := s.cands
	lo, hi := c[0].cost, c[0].cost // costs are finite: plain comparisons suffice
	for _, x := range c[1:] {
		if x.cost < lo {
			lo = x.cost
		}
		if x.cost > hi {
			hi = x.cost
		}
	}
	if s.Scoring.Temperature <= 0 || hi == lo {
		// The lowest cost, ties broken uniformly with one draw.
		ties := 0
		for _, x := range c {
			if x.cost == lo {
				ties++
			}
		}
		k := 0
		if ties > 1 {
			k = s.rand.IntN(ties)
		}
		for _, x := range c {
			if x.cost == lo {
				if k == 0 {
					return Choice{x.w, x.rank}
				}
				k--
			}
		}
	}
	scale := (hi - lo) * s.Scoring.Temperature
	sum := 0.0
	for i := range c {
		c[i].cost = math.Exp(-(c[i].cost - lo) / scale) // reuse the field as the weight
		sum += c[i].cost
	}
	x := s.rand.Float64() * sum
	for _, y := range c {
		if x < y.cost {
			return Choice{y.w, y.rank}
		}
		x -= y.cost
	}
	last := c[len(c)-1]
	return Choice{last.w, last.rank}
}

// overlap returns r's cached tokens on worker id, from Dispatch-Worker-Overlap.
func overlap(id string, r *request.Snapshot) uint64 {
	if r.Route == nil {
		return 0
	}
	for _, o := range r.Route.Overlap {
		if o.Worker == id {
			return o.Tokens
		}
	}
	return 0
}
