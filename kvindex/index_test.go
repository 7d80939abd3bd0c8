package kvindex_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
)

func newIndex(t testing.TB, maxBlocks int) *kvindex.Index {
	t.Helper()
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: maxBlocks})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// ev builds an event of instance "a" storing hashes in one tier.
func ev(id uint64, rank int32, tier wire.Tier, stored ...uint64) *wire.KVEvent {
	e := &wire.KVEvent{Instance: "a", ID: id, Rank: rank}
	e.Stored[tier] = stored
	return e
}

func apply(t *testing.T, x *kvindex.Index, w string, e *wire.KVEvent) kvindex.Result {
	t.Helper()
	r, err := x.Apply(w, e)
	if err != nil {
		t.Fatalf("Apply(%s, %+v): %v", w, e, err)
	}
	return r
}

func overlap(x *kvindex.Index, w string, rank int32, hashes ...uint64) kvindex.Hit {
	var o kvindex.Overlaps
	x.Overlap(hashes, &o)
	return o.Of(w, rank)
}

func TestOverlapPrefixAndTiers(t *testing.T) {
	x := newIndex(t, 100)
	apply(t, x, "w1", ev(1, 0, wire.Device, 10, 11, 13))
	apply(t, x, "w1", ev(2, 0, wire.Disk, 11, 12)) // 11 in device and disk, 12 on disk
	apply(t, x, "w2", ev(1, 3, wire.Host, 10, 11, 12, 13))
	for _, c := range []struct {
		w      string
		rank   int32
		hashes []uint64
		blocks int
		weight float64
	}{
		{"w1", 0, []uint64{10, 11, 12, 13, 14}, 4, 1 + 1 + 0.5 + 1},
		{"w1", 0, []uint64{10, 12}, 2, 1.5}, // held in this order: the index knows no parents
		{"w1", 0, []uint64{11, 12}, 2, 1.5}, // a query need not start at a rank's first block
		{"w2", 3, []uint64{10, 11, 12, 13}, 4, 3},
		{"w2", 3, []uint64{9, 10}, 0, 0}, // the first block missing: nothing
		{"w1", 1, []uint64{10}, 0, 0},    // unknown rank
	} {
		h := overlap(x, c.w, c.rank, c.hashes...)
		if h.Blocks != c.blocks || h.Weighted != c.weight {
			t.Errorf("%s/%d %v: got %d blocks weighted %v, want %d, %v", c.w, c.rank, c.hashes, h.Blocks, h.Weighted, c.blocks, c.weight)
		}
	}
	// A rank holding block 2 but not block 1 stops at block 1.
	apply(t, x, "w1", &wire.KVEvent{Instance: "a", ID: 3, Rank: 0, Removed: [wire.NumTiers][]uint64{wire.Device: {11}, wire.Disk: {11}}})
	if h := overlap(x, "w1", 0, 10, 11, 12, 13); h.Blocks != 1 {
		t.Errorf("after removing block 1: got %d blocks, want 1", h.Blocks)
	}
}

func TestSequence(t *testing.T) {
	x := newIndex(t, 100)
	apply(t, x, "w", ev(1, 0, wire.Device, 1, 2))
	if r := apply(t, x, "w", ev(1, 0, wire.Device, 3)); !r.Duplicate {
		t.Fatalf("repeated id: got %+v, want a duplicate", r)
	}
	if h := overlap(x, "w", 0, 1, 2, 3); h.Blocks != 2 {
		t.Fatalf("a duplicate applied: got %d blocks, want 2", h.Blocks)
	}
	// A gap: stale, overlap 0, reported once, stores ignored.
	if r := apply(t, x, "w", ev(3, 0, wire.Device, 3)); !r.Gap {
		t.Fatalf("skipped id 2: got %+v, want a gap", r)
	}
	if !x.Stale("w", 0) || overlap(x, "w", 0, 1).Blocks != 0 {
		t.Fatalf("after a gap: stale %v, overlap %d; want stale, 0", x.Stale("w", 0), overlap(x, "w", 0, 1).Blocks)
	}
	if got := x.TakeStale(nil); !slices.Equal(got, []kvindex.Rank{{Worker: "w", Rank: 0}}) {
		t.Fatalf("TakeStale: got %v", got)
	}
	if got := x.TakeStale(nil); len(got) != 0 {
		t.Fatalf("TakeStale again: got %v, want nothing", got)
	}
	apply(t, x, "w", ev(4, 0, wire.Device, 1))
	part := ev(5, 0, wire.Device, 1)
	part.Cleared = 1 << wire.Device // a partial clear does not resynchronise
	apply(t, x, "w", part)
	if !x.Stale("w", 0) {
		t.Fatal("a partial clear ended staleness")
	}
	// A full clear (even after another gap) resynchronises; its stores apply.
	full := ev(9, 0, wire.Host, 1, 2)
	full.Cleared = wire.AllTiers
	if r := apply(t, x, "w", full); !r.Resynced || r.Gap {
		t.Fatalf("full clear: got %+v, want resynced without a gap", r)
	}
	if h := overlap(x, "w", 0, 1, 2); x.Stale("w", 0) || h.Blocks != 2 || h.Weighted != 1.5 {
		t.Fatalf("after the resync: stale %v, %+v", x.Stale("w", 0), h)
	}
	// The first event of a rank must be id 1, or it is a gap.
	if r := apply(t, x, "w", ev(5, 1, wire.Device, 1)); !r.Gap {
		t.Fatalf("rank 1 starting at id 5: got %+v, want a gap", r)
	}
}

func TestNewInstance(t *testing.T) {
	x := newIndex(t, 100)
	apply(t, x, "w", ev(1, 0, wire.Device, 1))
	apply(t, x, "w", ev(1, 1, wire.Device, 1))
	apply(t, x, "w", ev(3, 2, wire.Device, 1)) // rank 2 stale
	e := ev(1, 0, wire.Device, 2)
	e.Instance = "b"
	if r := apply(t, x, "w", e); !r.NewInstance || r.Gap {
		t.Fatalf("got %+v, want a new instance without a gap", r)
	}
	if got := x.Stats(); got.Blocks != 1 || got.Stale != 0 {
		t.Fatalf("after the new instance: %+v, want 1 block (the new one) and no stale rank", got)
	}
	if h := overlap(x, "w", 1, 1); h.Blocks != 0 {
		t.Fatalf("rank 1 kept its old block: %+v", h)
	}
	e = ev(1, 1, wire.Device, 1)
	e.Instance = "b"
	if r := apply(t, x, "w", e); r.Gap || r.Duplicate {
		t.Fatalf("rank 1's first event of the new instance: got %+v", r)
	}
}

func TestBound(t *testing.T) {
	x := newIndex(t, 5)
	apply(t, x, "big", ev(1, 0, wire.Device, 1, 2, 3))
	apply(t, x, "small", ev(1, 0, wire.Device, 1, 2))
	apply(t, x, "small", ev(2, 0, wire.Host, 1, 2)) // a second tier is not a new pair
	r := apply(t, x, "small", ev(3, 0, wire.Device, 3))
	if r.Evictions != 1 || !x.Stale("big", 0) || x.Stale("small", 0) {
		t.Fatalf("got %+v, big stale %v, small stale %v; want big evicted", r, x.Stale("big", 0), x.Stale("small", 0))
	}
	if got := x.Stats(); got.Blocks != 3 {
		t.Fatalf("got %d blocks, want 3", got.Blocks)
	}
	if got := x.TakeStale(nil); !slices.Equal(got, []kvindex.Rank{{Worker: "big", Rank: 0}}) {
		t.Fatalf("TakeStale: got %v", got)
	}
	// The storing rank is the largest: it is the one evicted, the rest ignored.
	r = apply(t, x, "small", ev(4, 0, wire.Device, 4, 5, 6, 7))
	if r.Evictions != 1 || !x.Stale("small", 0) || x.Stats().Blocks != 0 {
		t.Fatalf("got %+v, stats %+v; want small evicted and empty", r, x.Stats())
	}
}

func TestDropWorker(t *testing.T) {
	x := newIndex(t, 100)
	apply(t, x, "w", ev(1, 0, wire.Device, 1))
	apply(t, x, "w", ev(3, 1, wire.Device, 1))
	x.DropWorker("w")
	if got := x.Stats(); got != (kvindex.Stats{}) {
		t.Fatalf("after DropWorker: %+v", got)
	}
	if got := x.TakeStale(nil); len(got) != 0 {
		t.Fatalf("TakeStale reported a dropped worker: %v", got)
	}
	if r := apply(t, x, "w", ev(1, 0, wire.Device, 1)); r.Gap || r.Duplicate || r.NewInstance {
		t.Fatalf("the worker back: got %+v", r)
	}
}

func TestInvalid(t *testing.T) {
	x := newIndex(t, 100)
	long := strings.Repeat("i", wire.MaxKVInstanceLen+1)
	many := make([]uint64, wire.MaxHashes+1)
	for _, e := range []*wire.KVEvent{
		{Instance: "", ID: 1},
		{Instance: long, ID: 1},
		{Instance: "a", ID: 0},
		{Instance: "a", ID: 1, Rank: -1},
		{Instance: "a", ID: 1, Rank: wire.MaxRank + 1},
		{Instance: "a", ID: 1, Cleared: 1 << 4},
		ev(1, 0, wire.Shared, many...),
	} {
		if _, err := x.Apply("w", e); !errors.Is(err, kvindex.ErrInvalidEvent) {
			t.Errorf("Apply(%.60v): got %v, want ErrInvalidEvent", e, err)
		}
	}
	if got := x.Stats(); got != (kvindex.Stats{}) {
		t.Fatalf("invalid events changed the index: %+v", got)
	}
	_, err := kvindex.New(kvindex.Config{Weights: [wire.NumTiers]float64{2, -1, 0, 0}, MaxBlocks: 0})
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Fatalf("New with three bad settings: got %v, want three errors", err)
	}
}

func TestParseTier(t *testing.T) {
	for tier := range wire.NumTiers {
		if got, ok := wire.ParseTier(tier.String()); !ok || got != tier {
			t.Errorf("ParseTier(%q) = %v, %v", tier.String(), got, ok)
		}
	}
	if _, ok := wire.ParseTier("Device"); ok {
		t.Error("ParseTier accepted wire.Device")
	}
}

func TestOverlapAllocs(t *testing.T) {
	x := newIndex(t, 1<<20)
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	for r := range int32(8) {
		apply(t, x, "w", ev(1, r, wire.Device, hashes[:8*(r+1)]...))
	}
	var o kvindex.Overlaps
	x.Overlap(hashes, &o) // grows the buffer once
	if n := testing.AllocsPerRun(100, func() { x.Overlap(hashes, &o) }); n != 0 {
		t.Fatalf("got %v allocations per query, want 0", n)
	}
	if best, ok := o.Best(); !ok || best.Rank != 7 || best.Blocks != 64 {
		t.Fatalf("Best: got %+v, %v", best, ok)
	}
}

func TestMaxRanks(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 100, MaxRanks: 2})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, x, "a", ev(1, 0, wire.Device, 1))
	apply(t, x, "a", ev(1, 1, wire.Device, 1))
	for _, w := range []string{"a", "b"} {
		if _, err := x.Apply(w, ev(1, 2, wire.Device, 1)); !errors.Is(err, kvindex.ErrTooManyRanks) {
			t.Fatalf("a third rank (%s): got %v, want ErrTooManyRanks", w, err)
		}
	}
	if got := x.Stats(); got.Ranks != 2 || got.Blocks != 2 {
		t.Fatalf("after refusals: %+v", got)
	}
	x.DropWorker("a")
	apply(t, x, "b", ev(1, 2, wire.Device, 1))
	if _, err := kvindex.New(kvindex.Config{MaxBlocks: 1, MaxRanks: kvindex.MaxSlots + 1}); err == nil {
		t.Fatal("New accepted MaxRanks above MaxSlots")
	}
}
