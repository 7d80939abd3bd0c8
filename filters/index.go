package filters

import (
	"math"

	"fairdispatch/internal/iheap"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// This file is the rank index of docs/design.md, Worker selection index: it
// lets an unconstrained request find its lowest-cost ranks without scoring
// every rank.
//
// Without an overlap credit or preferred taints, a rank's cost is a monotone
// function of its load alone: prefill_load_scale × (prefill + isl) / block_size
// + decode + request_blocks + decode_active_request_weight × requests. Ranks
// are grouped in buckets of equal load (prefill, decode, requests), which
// therefore have equal cost for any request; the buckets are kept in a binary
// min-heap keyed by the load part of the cost, key = prefill_load_scale ×
// prefill / block_size + decode + decode_active_request_weight × requests. A
// rank is in the index when its worker is live and not overloaded and the
// rank is not at capacity: exactly the ranks the scan scores for a request
// without constraints.
//
// A query reads the least key, visits every bucket whose key is within a
// rounding margin of it (a walk of the heap that stops at larger keys), and
// scores one rank of each with the scan's own formula, so that the cost, the
// set of tied ranks and the one random draw among them are the scan's. Only
// the order among tied ranks differs (bucket order, not registry order).
//
// The index follows the registry's change journal (workers.Registry.Changed):
// each Select first re-keys the ranks of the workers that changed. Changing
// the scoring or the thresholds, or another registry, rebuilds it.

// slot is where one rank sits in the index.
type slot struct {
	b   *bucket // nil: not a member
	pos int     // in b.members
}

// member is one rank in a bucket.
type member struct {
	w *workers.Worker
	i int // index in w.Ranks (and in the worker's slots)
}

type loadKey struct{ prefill, decode, requests uint64 }

// bucket holds the member ranks of one load.
type bucket struct {
	load    loadKey
	key     float64
	heapIdx int
	members []member
}

// entry is the index's record of a worker.
type entry struct {
	slots []slot // per rank
}

type index struct {
	reg     *workers.Registry
	scoring Scoring
	thr     thresholdValues
	built   bool

	buckets map[loadKey]*bucket
	heap    iheap.Heap[*bucket, byKey]
	free    []*bucket
	byW     map[*workers.Worker]*entry
	visit   []*bucket // scratch for queries: buckets near the least key
	best    []*bucket // scratch: the buckets of the least cost
}

// thresholdValues is Thresholds by value, to notice a change.
type thresholdValues struct {
	decode, frac     float64
	prefill          uint64
	hasD, hasP, hasF bool
}

func valuesOf(t Thresholds) thresholdValues {
	var v thresholdValues
	if t.DecodeBlocks != nil {
		v.decode, v.hasD = *t.DecodeBlocks, true
	}
	if t.PrefillTokens != nil {
		v.prefill, v.hasP = *t.PrefillTokens, true
	}
	if t.PrefillFrac != nil {
		v.frac, v.hasF = *t.PrefillFrac, true
	}
	return v
}

// unconstrained reports whether r can use the index: not pinned, no
// allow-list, no required or preferred taints, no overlap (neither
// Dispatch-Worker-Overlap nor block hashes scored against a KV index), and a
// temperature of 0 (a softmax draws over every rank).
func (s *Selector) unconstrained(r *request.Snapshot) bool {
	if s.Scoring.Temperature > 0 || r.Pin.Pinned() {
		return false
	}
	rt := r.Route
	return rt == nil || (rt.Allowed == nil && len(rt.Required) == 0 && len(rt.Preferred) == 0 &&
		len(rt.Overlap) == 0 && (s.KV == nil || rt.Hashes == nil))
}

// sync brings the index up to date with reg, the scoring and the thresholds.
func (x *index) sync(reg *workers.Registry, sc Scoring, t Thresholds) {
	changed, all := reg.Changed()
	if tv := valuesOf(t); !x.built || x.reg != reg || x.scoring != sc || x.thr != tv || all {
		x.rebuild(reg, sc, tv, t)
		return
	}
	for _, w := range changed {
		x.update(reg, w, t)
	}
}

func (x *index) rebuild(reg *workers.Registry, sc Scoring, tv thresholdValues, t Thresholds) {
	if x.buckets == nil {
		x.buckets = make(map[loadKey]*bucket)
		x.byW = make(map[*workers.Worker]*entry)
	}
	for _, b := range x.heap {
		x.release(b)
	}
	clear(x.buckets)
	clear(x.byW)
	x.heap = x.heap[:0]
	x.reg, x.scoring, x.thr, x.built = reg, sc, tv, true
	for _, w := range reg.All() {
		x.update(reg, w, t)
	}
}

func (x *index) release(b *bucket) {
	clear(b.members)
	b.members = b.members[:0]
	x.free = append(x.free, b)
}

// update re-keys every rank of w, or drops them when w is no longer live.
func (x *index) update(reg *workers.Registry, w *workers.Worker, t Thresholds) {
	e := x.byW[w]
	if reg.Get(w.ID) != w {
		if e != nil {
			for i := range e.slots {
				x.remove(&e.slots[i])
			}
			delete(x.byW, w)
		}
		return
	}
	if e == nil {
		e = &entry{}
		x.byW[w] = e
	}
	if len(e.slots) != len(w.Ranks) { // new worker or a change of rank range
		for i := range e.slots {
			x.remove(&e.slots[i])
		}
		e.slots = make([]slot, len(w.Ranks))
	}
	over := t.Overloaded(w)
	for i := range w.Ranks {
		sl := &e.slots[i]
		rk := &w.Ranks[i]
		if over || w.Full(rk) {
			x.remove(sl)
			continue
		}
		l := rk.Load()
		k := loadKey{l.ActivePrefillTokens, l.ActiveDecodeBlocks, l.ActiveRequests}
		// A load the cost does not weigh must not split buckets: ranks that
		// differ only there are tied, and one bucket holds them.
		if x.scoring.PrefillScale == 0 {
			k.prefill = 0
		}
		if x.scoring.DecodeRequestWeight == 0 {
			k.requests = 0
		}
		if sl.b != nil && sl.b.load == k {
			continue
		}
		x.remove(sl)
		b := x.buckets[k]
		if b == nil {
			b = x.newBucket(k)
		}
		sl.b, sl.pos = b, len(b.members)
		b.members = append(b.members, member{w, i})
	}
}

func (x *index) newBucket(k loadKey) *bucket {
	var b *bucket
	if n := len(x.free); n > 0 {
		b, x.free = x.free[n-1], x.free[:n-1]
	} else {
		b = &bucket{}
	}
	sc := &x.scoring
	b.load = k
	b.key = sc.PrefillScale*float64(k.prefill)/sc.BlockSize + float64(k.decode) +
		sc.DecodeRequestWeight*float64(k.requests)
	x.buckets[k] = b
	x.heap.Push(b)
	return b
}

// remove takes the rank at sl out of its bucket, and an emptied bucket out of the heap.
func (x *index) remove(sl *slot) {
	b := sl.b
	if b == nil {
		return
	}
	last := len(b.members) - 1
	if sl.pos != last {
		m := b.members[last]
		b.members[sl.pos] = m
		x.byW[m.w].slots[m.i].pos = sl.pos
	}
	b.members[last] = member{}
	b.members = b.members[:last]
	sl.b = nil
	if last == 0 {
		delete(x.buckets, b.load)
		x.heap.Remove(b.heapIdx)
		x.release(b)
	}
}

// byKey orders the buckets' heap: x.heap[0] has the least key; each bucket
// knows its position.
type byKey struct{}

func (byKey) Less(a, b *bucket) bool    { return a.key < b.key }
func (byKey) SetIndex(b *bucket, i int) { b.heapIdx = i }

// selectIndexed is Select for an unconstrained request, from the index.
func (s *Selector) selectIndexed(reg *workers.Registry, r *request.Snapshot) (Choice, request.Code) {
	x := &s.index
	x.sync(reg, s.Scoring, s.Thresholds)
	if reg.Len() == 0 {
		return Choice{}, request.NoEndpoints
	}
	if len(x.heap) == 0 {
		return Choice{}, request.AllWorkersOverloaded
	}
	sc := &s.Scoring
	isl := float64(r.ISL)
	reqBlocks := math.Ceil(isl / sc.BlockSize)
	// Every bucket whose key is within the rounding error of the least key
	// may hold the least cost: score one rank of each.
	least := x.heap[0].key
	limit := least + 1e-9*(math.Abs(least)+sc.PrefillScale*isl/sc.BlockSize+reqBlocks+1)
	x.visit = x.visit[:0]
	x.collect(0, limit)
	lo := math.Inf(1)
	ties := 0
	x.best = x.best[:0]
	for _, b := range x.visit {
		m := b.members[0]
		c := s.cost(m.w.Ranks[m.i].Load(), isl, reqBlocks, 0, 1)
		switch {
		case c < lo:
			lo, ties = c, len(b.members)
			x.best = append(x.best[:0], b)
		case c == lo:
			ties += len(b.members)
			x.best = append(x.best, b)
		}
	}
	k := 0
	if ties > 1 {
		k = s.rand.IntN(ties)
	}
	for _, b := range x.best {
		if k < len(b.members) {
			m := b.members[k]
			return Choice{m.w, int32(m.w.Start) + int32(m.i)}, ""
		}
		k -= len(b.members)
	}
	panic("filters: index lost its tied ranks")
}

// collect appends to x.visit every bucket at or under heap index i with a
// key <= limit.
func (x *index) collect(i int, limit float64) {
	if i >= len(x.heap) || x.heap[i].key > limit {
		return
	}
	x.visit = append(x.visit, x.heap[i])
	x.collect(2*i+1, limit)
	x.collect(2*i+2, limit)
}
