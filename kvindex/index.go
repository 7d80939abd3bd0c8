package kvindex

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"fairdispatch/wire"
)

// Bounds of the index (those of an event are wire's: wire.MaxHashes,
// wire.MaxRank, wire.MaxKVInstanceLen).
const (
	// MaxSlots is the largest MaxRanks: the holder entries have 27 bits for
	// a rank slot.
	MaxSlots = 1 << 27
	// DefaultMaxRanks is the default bound on the worker ranks tracked at once.
	DefaultMaxRanks = 1 << 16
)

// DefaultWeights are the tier weights of `--kv-tier-weights` by default:
// device=1,host=0.75,disk=0.5,shared=0.5.
var DefaultWeights = [wire.NumTiers]float64{1, 0.75, 0.5, 0.5}

// DefaultMaxBlocks is the default bound on the (rank, block) pairs held: about
// 4 million, some 250 MiB of index.
const DefaultMaxBlocks = 1 << 22

// Config configures an [Index].
type Config struct {
	// Weights is each tier's weight per block, in [0, 1]; a block counts with
	// the largest weight among the tiers holding it.
	Weights [wire.NumTiers]float64
	// MaxBlocks bounds the (rank, block) pairs held, >= 1. A block held by a
	// rank in several tiers counts once. See "Bounded memory" in the package doc.
	MaxBlocks int
	// MaxRanks bounds the worker ranks tracked at once, 1 to MaxSlots; 0
	// means DefaultMaxRanks. An event of a further rank is refused with
	// ErrTooManyRanks (the caller should only apply events of workers it
	// knows, and DropWorker those that leave).
	MaxRanks int
}

// Result says what [Index.Apply] did with an event.
type Result struct {
	Ops         int  // stored and removed hashes in the event, applied or not
	Duplicate   bool // event_id not above the rank's last: ignored entirely
	NewInstance bool // a new instance: the worker's blocks were dropped first
	Gap         bool // event_id skipped some: the rank is now stale
	Resynced    bool // a full clear ended the rank's staleness
	Evictions   int  // ranks made stale by the MaxBlocks bound (see Overflow)
}

// ErrInvalidEvent is returned for an event outside the bounds; the index is
// unchanged.
var ErrInvalidEvent = errors.New("kvindex: invalid event")

// ErrTooManyRanks is returned when an event would add a rank beyond
// Config.MaxRanks; the index is unchanged.
var ErrTooManyRanks = errors.New("kvindex: too many worker ranks")

// A holder entry packs a rank slot and its tiers for one block:
// bits 0-3 tiers, bit 4 a mark used by compaction, bits 5-31 the slot.
const (
	tierMask  = uint32(wire.AllTiers)
	markBit   = 1 << 4
	slotShift = 5
)

type slotKey struct {
	worker string
	rank   int32
}

type worker struct {
	id       string
	instance string
	slots    []int32
}

type slot struct {
	w       *worker // nil: free
	rank    int32
	last    uint64 // last event id of this instance; 0: none yet
	stale   bool
	pending bool // in newlyStale, not yet taken
	held    int  // blocks held in any tier
	tiers   [wire.NumTiers]int
	// list holds every block the slot holds, plus stale entries of blocks it
	// dropped (and so possibly duplicates); compacted when it passes 2*held+16.
	list []uint64
}

// Index is the KV cache index: which worker rank holds which blocks in which
// tier. The zero Index is not usable; build one with [New].
type Index struct {
	blocks    map[uint64][]uint32 // block hash -> holder entries, never empty
	dense     map[uint64]dense    // block hash -> dense form, for many holders
	slots     []slot
	free      []int32
	bySlot    map[slotKey]int32
	workers   map[string]*worker
	best      [1 << wire.NumTiers]float64 // weight of a tier set: its largest weight
	order     [wire.NumTiers]wire.Tier    // the tiers by decreasing weight
	orderW    [wire.NumTiers]float64      // their weights
	bestOrd   [1 << wire.NumTiers]float64 // weight of a set of tier classes (order indexes)
	max       int
	maxRanks  int
	total     int
	tierTotal [wire.NumTiers]int
	stale     int
	// newlyStale lists slots marked stale since the last TakeStale.
	newlyStale []int32
}

// New returns an empty index, or an error naming each bad setting.
func New(c Config) (*Index, error) {
	var errs []error
	for t, w := range c.Weights {
		if math.IsNaN(w) || w < 0 || w > 1 {
			errs = append(errs, fmt.Errorf("kvindex: weight of %s is %v, want a number in [0, 1]", wire.Tier(t), w))
		}
	}
	if c.MaxBlocks < 1 {
		errs = append(errs, fmt.Errorf("kvindex: max blocks is %d, want at least 1", c.MaxBlocks))
	}
	if c.MaxRanks == 0 {
		c.MaxRanks = DefaultMaxRanks
	}
	if c.MaxRanks < 1 || c.MaxRanks > MaxSlots {
		errs = append(errs, fmt.Errorf("kvindex: max ranks is %d, want 1 to %d", c.MaxRanks, MaxSlots))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	x := &Index{
		blocks:   make(map[uint64][]uint32),
		dense:    make(map[uint64]dense),
		bySlot:   make(map[slotKey]int32),
		workers:  make(map[string]*worker),
		max:      c.MaxBlocks,
		maxRanks: c.MaxRanks,
	}
	for set := range x.best {
		for t := range wire.NumTiers {
			if set&(1<<t) != 0 && c.Weights[t] > x.best[set] {
				x.best[set] = c.Weights[t]
			}
		}
	}
	for t := range wire.NumTiers {
		x.order[t] = t
	}
	slices.SortStableFunc(x.order[:], func(a, b wire.Tier) int { return cmp.Compare(c.Weights[b], c.Weights[a]) })
	for k, t := range x.order {
		x.orderW[k] = c.Weights[t]
	}
	for set := range x.bestOrd {
		var ts wire.Tiers
		for k, t := range x.order {
			if set&(1<<k) != 0 {
				ts |= 1 << t
			}
		}
		x.bestOrd[set] = x.best[ts]
	}
	return x, nil
}

// Apply applies one event of worker workerID. Cost: O(hashes in the event)
// map operations, plus O(blocks of the rank) for a clear, O(blocks of the
// worker) for a new instance, and O(ranks + blocks of the victim) for each
// eviction; amortized O(1) list compaction per removal.
func (x *Index) Apply(workerID string, ev *wire.KVEvent) (Result, error) {
	var r Result
	if ev.Instance == "" || len(ev.Instance) > wire.MaxKVInstanceLen || ev.ID == 0 ||
		ev.Rank < 0 || ev.Rank > wire.MaxRank || ev.Cleared&^wire.AllTiers != 0 {
		return r, ErrInvalidEvent
	}
	for t := range wire.NumTiers {
		if len(ev.Stored[t]) > wire.MaxHashes || len(ev.Removed[t]) > wire.MaxHashes {
			return r, ErrInvalidEvent
		}
	}
	w := x.workers[workerID]
	if w == nil {
		if len(x.slots)-len(x.free) >= x.maxRanks {
			return r, ErrTooManyRanks
		}
		w = &worker{id: strings.Clone(workerID), instance: strings.Clone(ev.Instance)}
		x.workers[w.id] = w
	} else if w.instance != ev.Instance {
		r.NewInstance = true
		w.instance = strings.Clone(ev.Instance)
		for _, s := range w.slots {
			x.clearAll(s)
			sl := &x.slots[s]
			sl.last = 0
			if sl.stale {
				sl.stale = false
				x.stale--
			}
		}
	}
	s, ok := x.bySlot[slotKey{w.id, ev.Rank}]
	if !ok {
		if len(x.slots)-len(x.free) >= x.maxRanks {
			return r, ErrTooManyRanks
		}
		s = x.newSlot(w, ev.Rank)
	}
	sl := &x.slots[s]
	if sl.last != 0 && ev.ID <= sl.last {
		r.Duplicate = true
		return r, nil
	}
	full := ev.Cleared == wire.AllTiers
	if ev.ID != sl.last+1 && !full && !sl.stale {
		r.Gap = true
		x.markStale(s)
	}
	sl.last = ev.ID
	switch {
	case full:
		x.clearAll(s)
		if sl.stale {
			sl.stale = false
			x.stale--
			r.Resynced = true
		}
	case sl.stale:
	case ev.Cleared != 0:
		x.clearTiers(s, uint32(ev.Cleared))
	}
	for t := range wire.NumTiers {
		r.Ops += len(ev.Removed[t]) + len(ev.Stored[t])
	}
	if sl.stale {
		return r, nil
	}
	for t := range wire.NumTiers {
		bit := uint32(1) << t
		for _, h := range ev.Removed[t] {
			x.remove(s, h, bit)
		}
	}
	for t := range wire.NumTiers {
		bit := uint32(1) << t
		for _, h := range ev.Stored[t] {
			if !x.store(s, h, bit, &r) {
				return r, nil // this rank was evicted: it is stale now
			}
		}
	}
	return r, nil
}

func (x *Index) newSlot(w *worker, rank int32) int32 {
	var s int32
	if n := len(x.free); n > 0 {
		s = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		s = int32(len(x.slots))
		x.slots = append(x.slots, slot{})
	}
	x.slots[s] = slot{w: w, rank: rank}
	x.bySlot[slotKey{w.id, rank}] = s
	w.slots = append(w.slots, s)
	return s
}

// store adds tier bit of block h to slot s. It returns false when the bound
// made s itself stale.
func (x *Index) store(s int32, h uint64, bit uint32, r *Result) bool {
	hs := x.blocks[h]
	for i, e := range hs {
		if int32(e>>slotShift) == s {
			if e&bit == 0 {
				hs[i] = e | bit
				x.addTier(s, bit, 1)
				if d := x.denseFor(h, hs); d != nil {
					x.denseSet(h, d, len(hs), s, bit)
				}
			}
			return true
		}
	}
	if x.total >= x.max {
		v := x.largest(s)
		x.markStale(v)
		r.Evictions++
		if v == s {
			return false
		}
		hs = x.blocks[h] // the victim may have held h
	}
	hs = append(hs, uint32(s)<<slotShift|bit)
	x.blocks[h] = hs
	if d := x.denseFor(h, hs); d != nil {
		x.denseSet(h, d, len(hs), s, bit)
	} else {
		x.densify(h, hs)
	}
	sl := &x.slots[s]
	sl.list = append(sl.list, h)
	sl.held++
	x.total++
	x.addTier(s, bit, 1)
	return true
}

// remove drops tier bits of block h from slot s; unknown blocks are no-ops.
func (x *Index) remove(s int32, h uint64, bits uint32) {
	if x.drop(s, h, bits) {
		sl := &x.slots[s]
		if len(sl.list) > 2*sl.held+16 {
			x.compact(s)
		}
	}
}

// drop clears tier bits of block h in slot s's entry and reports whether the
// entry went away (the slot no longer holds h in any tier).
func (x *Index) drop(s int32, h uint64, bits uint32) bool {
	hs, ok := x.blocks[h]
	if !ok {
		return false
	}
	for i, e := range hs {
		if int32(e>>slotShift) != s {
			continue
		}
		gone := e & bits & tierMask
		if gone == 0 {
			return false
		}
		for t := range wire.NumTiers {
			if gone&(1<<t) != 0 {
				x.addTier(s, 1<<t, -1)
			}
		}
		d := x.denseFor(h, hs)
		if d != nil {
			x.denseBits(d, s, gone, false)
		}
		e &^= gone
		if e&tierMask != 0 {
			hs[i] = e
			return false
		}
		last := len(hs) - 1
		if d != nil && last < denseOff(d.words()) {
			delete(x.dense, h)
		}
		hs[i] = hs[last]
		if last == 0 {
			delete(x.blocks, h)
		} else {
			x.blocks[h] = hs[:last]
		}
		x.slots[s].held--
		x.total--
		return true
	}
	return false
}

func (x *Index) addTier(s int32, bit uint32, d int) {
	for t := range wire.NumTiers {
		if bit == 1<<t {
			x.slots[s].tiers[t] += d
			x.tierTotal[t] += d
			return
		}
	}
}

// clearTiers drops the given tiers of every block of slot s.
func (x *Index) clearTiers(s int32, bits uint32) {
	for _, h := range x.slots[s].list {
		x.drop(s, h, bits)
	}
	if sl := &x.slots[s]; len(sl.list) > 2*sl.held+16 {
		x.compact(s)
	}
}

// clearAll drops every block of slot s.
func (x *Index) clearAll(s int32) {
	sl := &x.slots[s]
	if sl.held > 0 {
		for _, h := range sl.list {
			x.drop(s, h, tierMask)
		}
	}
	if cap(sl.list) > 1024 {
		sl.list = nil // give a big list back
	} else {
		sl.list = sl.list[:0]
	}
}

// compact removes the stale entries and duplicates of slot s's list.
func (x *Index) compact(s int32) {
	sl := &x.slots[s]
	kept := sl.list[:0]
	for _, h := range sl.list {
		hs := x.blocks[h]
		for i, e := range hs {
			if int32(e>>slotShift) == s {
				if e&markBit == 0 {
					hs[i] = e | markBit
					kept = append(kept, h)
				}
				break
			}
		}
	}
	for _, h := range kept {
		hs := x.blocks[h]
		for i, e := range hs {
			if int32(e>>slotShift) == s {
				hs[i] = e &^ markBit
				break
			}
		}
	}
	sl.list = kept
}

// largest returns the slot holding the most blocks, s on a tie with s.
func (x *Index) largest(s int32) int32 {
	best := s
	for i := range x.slots {
		if x.slots[i].w != nil && x.slots[i].held > x.slots[best].held {
			best = int32(i)
		}
	}
	return best
}

// markStale drops slot s's blocks and marks it stale.
func (x *Index) markStale(s int32) {
	x.clearAll(s)
	sl := &x.slots[s]
	if !sl.stale {
		sl.stale = true
		x.stale++
	}
	if !sl.pending {
		sl.pending = true
		x.newlyStale = append(x.newlyStale, s)
	}
}

// Rank names a worker rank.
type Rank struct {
	Worker string
	Rank   int32
}

// TakeStale appends to dst the ranks made stale (by a gap or by the bound)
// since the last call and still stale, and returns it: the caller asks those
// workers to resynchronise (docs/protocol.md, KV cache events). Cost: O(ranks
// made stale since the last call).
func (x *Index) TakeStale(dst []Rank) []Rank {
	for _, s := range x.newlyStale {
		sl := &x.slots[s]
		if !sl.pending {
			continue
		}
		sl.pending = false
		if sl.w != nil && sl.stale {
			dst = append(dst, Rank{sl.w.id, sl.rank})
		}
	}
	x.newlyStale = x.newlyStale[:0]
	return dst
}

// StaleRanks appends every stale rank to dst and returns it, for asking them
// again to resynchronise. Cost: O(rank slots).
func (x *Index) StaleRanks(dst []Rank) []Rank {
	for i := range x.slots {
		if sl := &x.slots[i]; sl.w != nil && sl.stale {
			dst = append(dst, Rank{sl.w.id, sl.rank})
		}
	}
	return dst
}

// DropWorker forgets a worker: its blocks, ranks, instance and sequences (for
// a worker that left the fleet). Cost: O(its blocks + its ranks).
func (x *Index) DropWorker(workerID string) {
	w := x.workers[workerID]
	if w == nil {
		return
	}
	for _, s := range w.slots {
		x.clearAll(s)
		sl := &x.slots[s]
		if sl.stale {
			x.stale--
		}
		delete(x.bySlot, slotKey{w.id, sl.rank})
		x.slots[s] = slot{}
		x.free = append(x.free, s)
	}
	delete(x.workers, workerID)
}

// Stale reports whether a worker rank is stale (its overlap counts as 0 until
// it resynchronises). Cost: O(1).
func (x *Index) Stale(workerID string, rank int32) bool {
	s, ok := x.bySlot[slotKey{workerID, rank}]
	return ok && x.slots[s].stale
}

// Stats are the index's sizes, for metrics.
type Stats struct {
	Blocks     int                // (rank, block) pairs held, <= MaxBlocks
	Hashes     int                // distinct block hashes held by some rank
	TierBlocks [wire.NumTiers]int // (rank, block) pairs per tier
	Ranks      int                // worker ranks known
	Stale      int                // of which stale
}

// Stats returns the index's sizes. Cost: O(1).
func (x *Index) Stats() Stats {
	return Stats{
		Blocks:     x.total,
		Hashes:     len(x.blocks),
		TierBlocks: x.tierTotal,
		Ranks:      len(x.slots) - len(x.free),
		Stale:      x.stale,
	}
}

// Hit is the overlap of one worker rank with a request's hashes.
type Hit struct {
	Worker   string
	Rank     int32
	Blocks   int     // length of the longest prefix held, in any tier
	Weighted float64 // sum over that prefix of each block's best tier weight
}

// prefix is a rank's prefix so far in a query: its length and weight.
type prefix struct {
	n int32
	w float64
}

// Overlaps is the caller's buffer for [Index.Overlap]; reuse it so that
// queries do not allocate. The zero value is ready to use.
type Overlaps struct {
	// Hits lists every non-stale rank with a prefix of at least one block, in
	// no particular order (deterministic for a given history of events).
	Hits []Hit

	acc     []prefix    // per rank slot: the last query's prefixes
	words   []denseWord // the dense walk's state, per 64 slots
	touched []int32     // the slots with a prefix in the last query
	x       *Index      // the index of the last query
}

// Best returns the hit with the largest Weighted, ties to the longer prefix,
// then the earlier hit; ok is false when there is none.
func (o *Overlaps) Best() (h Hit, ok bool) {
	for i, c := range o.Hits {
		if i == 0 || c.Weighted > h.Weighted || c.Weighted == h.Weighted && c.Blocks > h.Blocks {
			h = c
		}
	}
	return h, len(o.Hits) > 0
}

// linearOf is the number of hits up to which Of scans them rather than look
// the rank up in the index.
const linearOf = 8

// Of returns the hit of one worker rank in the last query (the zero Hit when
// it has none). It must be called before the index changes. Cost: O(hits) up
// to 8 hits, else one map lookup.
func (o *Overlaps) Of(workerID string, rank int32) Hit {
	if len(o.Hits) <= linearOf {
		return o.scan(workerID, rank)
	}
	return o.lookup(workerID, rank)
}

func (o *Overlaps) scan(workerID string, rank int32) Hit {
	for _, h := range o.Hits {
		if h.Rank == rank && h.Worker == workerID {
			return h
		}
	}
	return Hit{}
}

func (o *Overlaps) lookup(workerID string, rank int32) Hit {
	if o.x == nil {
		return Hit{}
	}
	s, ok := o.x.bySlot[slotKey{workerID, rank}]
	if !ok || int(s) >= len(o.acc) || o.acc[s].n == 0 {
		return Hit{}
	}
	return Hit{Worker: o.x.slots[s].w.id, Rank: rank, Blocks: int(o.acc[s].n), Weighted: o.acc[s].w}
}

// Overlap computes, for every worker rank, the longest prefix of hashes it
// holds (block i held in some tier for every i below the length) and that
// prefix's weighted length, into out.Hits. Stale ranks hold nothing, so they
// never appear.
//
// Cost: one map lookup per block up to the longest prefix of any rank, plus
// one step per holder entry of those blocks, or per 64 rank slots for blocks
// with a dense form (see "Dense blocks" in the package doc); no allocation
// once out has seen as many rank slots as the index has (out grows with the
// index, amortized).
func (x *Index) Overlap(hashes []uint64, out *Overlaps) {
	out.Hits = out.Hits[:0]
	for _, s := range out.touched {
		if int(s) < len(out.acc) {
			out.acc[s] = prefix{}
		}
	}
	out.touched = out.touched[:0]
	out.x = x
	if len(hashes) == 0 {
		return
	}
	if len(out.acc) < len(x.slots) {
		out.acc = make([]prefix, max(len(x.slots), 2*len(out.acc)))
	}
	hs := x.blocks[hashes[0]]
	if len(hs) == 0 {
		return
	}
	acc, best := out.acc, &x.best
	from := 1
	if d := x.denseFor(hashes[0], hs); d != nil {
		from = x.walkDense(hashes, d, out)
	} else {
		for _, e := range hs {
			s := e >> slotShift
			acc[s] = prefix{1, best[e&tierMask]}
			out.touched = append(out.touched, int32(s))
		}
	}
	// The lookups go in batches: lookups of different blocks do not depend on
	// each other, so the processor overlaps their cache misses, which
	// dominate the cost on a large index. A batch may look up to
	// lookahead-1 blocks past the first miss.
	const lookahead = 8
	var batch [lookahead][]uint32
walk:
	for i := from; i < len(hashes); i += lookahead {
		k := min(lookahead, len(hashes)-i)
		for j := range k {
			batch[j] = x.blocks[hashes[i+j]]
		}
		for j := range k {
			b := int32(i + j)
			adv := 0
			for _, e := range batch[j] {
				s := e >> slotShift
				if p := &acc[s]; p.n == b {
					p.n = b + 1
					p.w += best[e&tierMask]
					adv++
				}
			}
			if adv == 0 {
				break walk
			}
		}
	}
	for _, s := range out.touched {
		sl := &x.slots[s]
		out.Hits = append(out.Hits, Hit{Worker: sl.w.id, Rank: sl.rank, Blocks: int(acc[s].n), Weighted: acc[s].w})
	}
}
