package kvindex

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"fairdispatch/wire"

	"pgregory.net/rapid"
)

// model is a deliberately naive reference of the index: per worker its
// instance, per rank a map from block to tier set, and the rules of the
// package doc written out directly.
type model struct {
	weights [wire.NumTiers]float64
	workers map[string]*mworker
	pending map[Rank]bool
}

type mworker struct {
	instance string
	ranks    map[int32]*mrank
}

type mrank struct {
	last  uint64
	stale bool
	held  map[uint64]wire.Tiers
}

func newModel(w [wire.NumTiers]float64) *model {
	return &model{weights: w, workers: map[string]*mworker{}, pending: map[Rank]bool{}}
}

func (m *model) makeStale(w string, r int32, mr *mrank) {
	mr.stale = true
	mr.held = map[uint64]wire.Tiers{}
	m.pending[Rank{w, r}] = true
}

func (m *model) apply(w string, ev *wire.KVEvent) {
	mw := m.workers[w]
	if mw == nil {
		mw = &mworker{instance: ev.Instance, ranks: map[int32]*mrank{}}
		m.workers[w] = mw
	} else if mw.instance != ev.Instance {
		mw.instance = ev.Instance
		for _, mr := range mw.ranks {
			mr.held, mr.last, mr.stale = map[uint64]wire.Tiers{}, 0, false
		}
	}
	mr := mw.ranks[ev.Rank]
	if mr == nil {
		mr = &mrank{held: map[uint64]wire.Tiers{}}
		mw.ranks[ev.Rank] = mr
	}
	if mr.last != 0 && ev.ID <= mr.last {
		return
	}
	full := ev.Cleared == wire.AllTiers
	if ev.ID != mr.last+1 && !full && !mr.stale {
		m.makeStale(w, ev.Rank, mr)
	}
	mr.last = ev.ID
	if full {
		mr.held = map[uint64]wire.Tiers{}
		mr.stale = false
	} else if !mr.stale {
		for h, ts := range mr.held {
			if ts &^= ev.Cleared; ts == 0 {
				delete(mr.held, h)
			} else {
				mr.held[h] = ts
			}
		}
	}
	if mr.stale {
		return
	}
	for t := range wire.NumTiers {
		for _, h := range ev.Removed[t] {
			if ts := mr.held[h] &^ (1 << t); ts == 0 {
				delete(mr.held, h)
			} else {
				mr.held[h] = ts
			}
		}
	}
	for t := range wire.NumTiers {
		for _, h := range ev.Stored[t] {
			mr.held[h] |= 1 << t
		}
	}
}

func (m *model) drop(w string) {
	for r := range m.workers[w].ranks {
		delete(m.pending, Rank{w, r})
	}
	delete(m.workers, w)
}

func (m *model) takeStale() []Rank {
	var out []Rank
	for r := range m.pending {
		if mw := m.workers[r.Worker]; mw != nil && mw.ranks[r.Rank].stale {
			out = append(out, r)
		}
	}
	m.pending = map[Rank]bool{}
	return out
}

func (m *model) overlap(hashes []uint64) []Hit {
	var out []Hit
	for w, mw := range m.workers {
		for r, mr := range mw.ranks {
			if mr.stale {
				continue
			}
			h := Hit{Worker: w, Rank: r}
			for _, b := range hashes {
				ts := mr.held[b]
				if ts == 0 {
					break
				}
				best := 0.0
				for t := range wire.NumTiers {
					if ts.Has(t) {
						best = max(best, m.weights[t])
					}
				}
				h.Blocks++
				h.Weighted += best
			}
			if h.Blocks > 0 {
				out = append(out, h)
			}
		}
	}
	return out
}

func (m *model) stats() Stats {
	var s Stats
	hashes := map[uint64]bool{}
	for _, mw := range m.workers {
		for _, mr := range mw.ranks {
			s.Ranks++
			if mr.stale {
				s.Stale++
			}
			for h, ts := range mr.held {
				s.Blocks++
				hashes[h] = true
				for t := range wire.NumTiers {
					if ts.Has(t) {
						s.TierBlocks[t]++
					}
				}
			}
		}
	}
	s.Hashes = len(hashes)
	return s
}

// check verifies the invariants of the package doc on the index's internals.
func (x *Index) check(t interface{ Fatalf(string, ...any) }) {
	held := make([]int, len(x.slots))
	var tiers [wire.NumTiers]int
	total := 0
	for h, hs := range x.blocks {
		if len(hs) == 0 {
			t.Fatalf("block %x has an empty holder slice", h)
		}
		seen := map[uint32]bool{}
		for _, e := range hs {
			s := e >> slotShift
			if seen[s] {
				t.Fatalf("block %x names slot %d twice", h, s)
			}
			seen[s] = true
			if e&tierMask == 0 || e&markBit != 0 {
				t.Fatalf("block %x slot %d entry %b: no tier or a mark left", h, s, e)
			}
			if int(s) >= len(x.slots) || x.slots[s].w == nil {
				t.Fatalf("block %x names a free slot %d", h, s)
			}
			held[s]++
			total++
			for tt := range wire.NumTiers {
				if e&(1<<tt) != 0 {
					tiers[tt]++
				}
			}
		}
	}
	if total != x.total || tiers != x.tierTotal {
		t.Fatalf("total %d tiers %v, counted %d %v", x.total, x.tierTotal, total, tiers)
	}
	if total > x.max {
		t.Fatalf("total %d above the bound %d", total, x.max)
	}
	stale := 0
	for s := range x.slots {
		sl := &x.slots[s]
		if sl.w == nil {
			continue
		}
		if sl.held != held[s] {
			t.Fatalf("slot %d held %d, counted %d", s, sl.held, held[s])
		}
		if sl.stale {
			stale++
			if sl.held != 0 {
				t.Fatalf("stale slot %d holds %d blocks", s, sl.held)
			}
		}
		if len(sl.list) > 2*sl.held+16 {
			t.Fatalf("slot %d list %d for %d held", s, len(sl.list), sl.held)
		}
		in := map[uint64]bool{}
		for _, h := range sl.list {
			in[h] = true
		}
		for h, hs := range x.blocks {
			for _, e := range hs {
				if int(e>>slotShift) == s && !in[h] {
					t.Fatalf("slot %d holds %x, missing from its list", s, h)
				}
			}
		}
	}
	if stale != x.stale {
		t.Fatalf("stale count %d, counted %d", x.stale, stale)
	}
}

// holdings returns what the index says a rank holds.
func (x *Index) holdings(w string, r int32) map[uint64]wire.Tiers {
	out := map[uint64]wire.Tiers{}
	s, ok := x.bySlot[slotKey{w, r}]
	if !ok {
		return out
	}
	for h, hs := range x.blocks {
		for _, e := range hs {
			if int32(e>>slotShift) == s {
				out[h] = wire.Tiers(e & tierMask)
			}
		}
	}
	return out
}

func sortHits(h []Hit) []Hit {
	return sortedByRank(h, func(h Hit) Rank { return Rank{h.Worker, h.Rank} })
}

func sortRanks(r []Rank) []Rank { return sortedByRank(r, func(r Rank) Rank { return r }) }

// sortedByRank returns a sorted copy of s, by worker then rank (at gives them).
func sortedByRank[T any](s []T, at func(T) Rank) []T {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b T) int {
		x, y := at(a), at(b)
		if c := strings.Compare(x.Worker, y.Worker); c != 0 {
			return c
		}
		return int(x.Rank - y.Rank)
	})
	return s
}

// gen is the worker side of the simulation: what each rank sent last.
type gen struct {
	instance map[string]string
	next     map[Rank]uint64
}

// identify draws the instance and id of ev, an event of worker w on rank
// ev.Rank: a new instance about once in newInstance events (and the first
// time), and, about once in seq events each, a redelivery of an old id (or
// the first, again) or a gap of skip() ids; else the next id.
func (g *gen) identify(t *rapid.T, w string, ev *wire.KVEvent, newInstance, seq int, skip func() uint64) {
	inst, ok := g.instance[w]
	if !ok || rapid.IntRange(0, newInstance-1).Draw(t, "newInstance") == 0 {
		inst = fmt.Sprintf("i%d", rapid.IntRange(0, 3).Draw(t, "instance"))
		if inst != g.instance[w] {
			g.forget(w)
		}
		g.instance[w] = inst
	}
	ev.Instance = inst
	key := Rank{w, ev.Rank}
	next := g.next[key] + 1
	switch rapid.IntRange(0, seq-1).Draw(t, "seq") {
	case 0:
		ev.ID = rapid.Uint64Range(1, next).Draw(t, "dupID")
	case 1:
		ev.ID = next + skip()
	default:
		ev.ID = next
	}
	if ev.ID >= next {
		g.next[key] = ev.ID
	}
}

// forget drops the ids the ranks of worker w sent last.
func (g *gen) forget(w string) {
	for r := range g.next {
		if r.Worker == w {
			delete(g.next, r)
		}
	}
}

// drawCleared draws ev's cleared tiers: all, about once in ten events, some
// about once in ten, else none.
func drawCleared(t *rapid.T, ev *wire.KVEvent) {
	switch rapid.IntRange(0, 9).Draw(t, "clear") {
	case 0:
		ev.Cleared = wire.AllTiers
	case 1:
		ev.Cleared = wire.Tiers(rapid.IntRange(1, int(wire.AllTiers)).Draw(t, "cleared"))
	}
}

// drawEvent draws an event of worker w: mostly in sequence, sometimes a
// duplicate, a gap, a new instance or a resynchronisation, over a small
// universe of hashes so that blocks are shared, removed unknown and re-stored.
func (g *gen) drawEvent(t *rapid.T, w string) *wire.KVEvent {
	ev := &wire.KVEvent{Rank: int32(rapid.IntRange(0, 2).Draw(t, "rank"))}
	g.identify(t, w, ev, 20, 10, func() uint64 { return rapid.Uint64Range(1, 3).Draw(t, "skip") })
	drawCleared(t, ev)
	hashes := rapid.SliceOfN(rapid.Uint64Range(0, 15), 0, 8)
	for tt := range wire.NumTiers {
		if rapid.IntRange(0, 2).Draw(t, "hasRemoved") == 0 {
			ev.Removed[tt] = hashes.Draw(t, "removed")
		}
		if rapid.IntRange(0, 1).Draw(t, "hasStored") == 0 {
			ev.Stored[tt] = hashes.Draw(t, "stored")
		}
	}
	return ev
}

// TestModel applies random event sequences (clears, removes of unknown blocks,
// duplicates, gaps, new instances, resynchronisations, dropped workers) to the
// index and to the naive model, with the bound out of reach, and requires the
// same holdings, staleness, statistics, stale reports and overlaps throughout.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x, m, g := newBoth(t, Config{Weights: [wire.NumTiers]float64{1, 0.75, 0.5, 0.25}, MaxBlocks: 1 << 20})
		var out Overlaps
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for range steps {
			w := fmt.Sprintf("w%d", rapid.IntRange(0, 2).Draw(t, "worker"))
			switch rapid.IntRange(0, 19).Draw(t, "op") {
			case 0:
				dropBoth(x, m, g, w)
			case 1:
				var all []Rank
				for w, mw := range m.workers {
					for r, mr := range mw.ranks {
						if mr.stale {
							all = append(all, Rank{w, r})
						}
					}
				}
				if got, want := sortRanks(x.StaleRanks(nil)), sortRanks(all); !slices.Equal(got, want) {
					t.Fatalf("StaleRanks: got %v, want %v", got, want)
				}
				got, want := sortRanks(x.TakeStale(nil)), sortRanks(m.takeStale())
				if !slices.Equal(got, want) {
					t.Fatalf("TakeStale: got %v, want %v", got, want)
				}
			case 2, 3, 4:
				q := rapid.SliceOfN(rapid.Uint64Range(0, 15), 0, 10).Draw(t, "query")
				want := checkOverlap(t, x, m, q, &out)
				for w, mw := range m.workers {
					for r := range mw.ranks {
						var wantHit Hit
						for _, h := range want {
							if h.Worker == w && h.Rank == r {
								wantHit = h
							}
						}
						if got := out.scan(w, r); got != wantHit {
							t.Fatalf("scan(%s, %d): got %+v, want %+v", w, r, got, wantHit)
						}
						if got := out.lookup(w, r); got != wantHit {
							t.Fatalf("lookup(%s, %d): got %+v, want %+v", w, r, got, wantHit)
						}
					}
				}
			default:
				applyBoth(t, x, m, w, drawEventOf(t, g, w))
			}
			checkBoth(t, x, m)
			for w, mw := range m.workers {
				for r, mr := range mw.ranks {
					if got := x.Stale(w, r); got != mr.stale {
						t.Fatalf("%s/%d stale %v, want %v", w, r, got, mr.stale)
					}
				}
			}
		}
	})
}

func drawEventOf(t *rapid.T, g *gen, w string) *wire.KVEvent { return g.drawEvent(t, w) }

// newBoth returns an index of cfg, the model of the same weights, and a
// generator that has sent nothing yet.
func newBoth(t *rapid.T, cfg Config) (*Index, *model, *gen) {
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x, newModel(cfg.Weights), &gen{instance: map[string]string{}, next: map[Rank]uint64{}}
}

// applyBoth applies ev of worker w to the index and to the model.
func applyBoth(t *rapid.T, x *Index, m *model, w string, ev *wire.KVEvent) {
	if _, err := x.Apply(w, ev); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	m.apply(w, ev)
}

// dropBoth drops worker w from the index and the model, and the generator
// forgets it.
func dropBoth(x *Index, m *model, g *gen, w string) {
	x.DropWorker(w)
	if m.workers[w] != nil {
		m.drop(w)
	}
	delete(g.instance, w)
	g.forget(w)
}

// checkOverlap requires the index's overlap of q (into out) to be the
// model's, which it returns.
func checkOverlap(t *rapid.T, x *Index, m *model, q []uint64, out *Overlaps) []Hit {
	x.Overlap(q, out)
	got, want := sortHits(out.Hits), sortHits(m.overlap(q))
	if !slices.Equal(got, want) {
		t.Fatalf("Overlap(%v): got %v, want %v", q, got, want)
	}
	return want
}

// checkBoth checks the index's invariants, and requires its statistics and
// every rank's holdings to be the model's.
func checkBoth(t *rapid.T, x *Index, m *model) {
	x.check(t)
	if got, want := x.Stats(), m.stats(); got != want {
		t.Fatalf("Stats: got %+v, want %+v", got, want)
	}
	for w, mw := range m.workers {
		for r, mr := range mw.ranks {
			if got := x.holdings(w, r); !maps.Equal(got, mr.held) {
				t.Fatalf("%s/%d holds %v, want %v", w, r, got, mr.held)
			}
		}
	}
}

// TestModelBounded runs the same sequences under a small bound. The model
// cannot guess ties between equally large ranks, so it follows the index's
// evictions, checking that each victim was the largest rank of the model
// (ties allowed) just before the store that evicted it, and that every other
// rank still matches the model exactly.
func TestModelBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x, m, g := newBoth(t, Config{Weights: DefaultWeights, MaxBlocks: rapid.IntRange(1, 24).Draw(t, "bound")})
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for range steps {
			w := fmt.Sprintf("w%d", rapid.IntRange(0, 2).Draw(t, "worker"))
			ev := g.drawEvent(t, w)
			// Apply the event one stored hash at a time so that each eviction
			// is checked against the model's sizes just before it.
			parts := split(ev)
			if last := parts[len(parts)-1].ID; last > g.next[Rank{w, ev.Rank}] {
				g.next[Rank{w, ev.Rank}] = last
			}
			for _, part := range parts {
				before := m.sizes()
				res, err := x.Apply(w, part)
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				m.apply(w, part)
				if res.Evictions > 1 {
					t.Fatalf("one stored hash evicted %d ranks", res.Evictions)
				}
				if res.Evictions == 1 {
					victims := 0
					for r, n := range before {
						mr := m.workers[r.Worker].ranks[r.Rank]
						if !x.Stale(r.Worker, r.Rank) || mr.stale {
							continue
						}
						victims++
						for _, o := range before {
							if o > n {
								t.Fatalf("evicted %v holding %d, another held %d", r, n, o)
							}
						}
						m.makeStale(r.Worker, r.Rank, mr)
					}
					if victims != 1 {
						t.Fatalf("%d victims for one eviction", victims)
					}
				}
			}
			checkBoth(t, x, m)
		}
	})
}

// sizes returns the blocks held per rank.
func (m *model) sizes() map[Rank]int {
	out := map[Rank]int{}
	for w, mw := range m.workers {
		for r, mr := range mw.ranks {
			out[Rank{w, r}] = len(mr.held)
		}
	}
	return out
}

// split splits an event into events of consecutive ids with the same effect
// (when no eviction intervenes): the clears and removals, then one stored
// hash each. Only the first part carries the event's id; the rest follow it.
// The caller moves the generator's sequence past the last part's id.
func split(ev *wire.KVEvent) []*wire.KVEvent {
	first := *ev
	first.Stored = [wire.NumTiers][]uint64{}
	parts := []*wire.KVEvent{&first}
	id := ev.ID
	for t := range wire.NumTiers {
		for _, h := range ev.Stored[t] {
			id++
			p := &wire.KVEvent{Instance: ev.Instance, ID: id, Rank: ev.Rank}
			p.Stored[t] = []uint64{h}
			parts = append(parts, p)
		}
	}
	return parts
}
