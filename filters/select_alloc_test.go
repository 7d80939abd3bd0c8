//go:build !race

package filters_test

import (
	"fmt"
	"testing"

	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// TestSelectDoesNotAllocate checks the promise of Selector: once warm, Select
// allocates nothing. (Skipped under -race, which allocates on its own.)
func TestSelectDoesNotAllocate(t *testing.T) {
	reg := registry(t, spec{id: "a", prefill: []uint64{0, 16}}, spec{id: "b", prefill: []uint64{16, 0, 5}})
	for _, temp := range []float64{0, 1} {
		sc := filters.DefaultScoring()
		sc.Temperature = temp
		s := newSelector(sc, filters.Thresholds{}, 1)
		reqs := []*request.Snapshot{
			{ISL: 16},
			{ISL: 16, Pin: pin("b", request.AnyRank)},
			{ISL: 16, Route: &request.Route{Preferred: []request.Taint{{Name: "x", Weight: 1}},
				Overlap: []request.Overlap{{Worker: "a", Tokens: 8}}}},
		}
		for _, r := range reqs {
			s.Select(reg, r)
			if got := testing.AllocsPerRun(100, func() { s.Select(reg, r) }); got != 0 {
				t.Errorf("T=%v: Select allocs: got %v, want 0", temp, got)
			}
		}
	}
}

// TestSelectWithKVDoesNotAllocate: scoring with the KV cache index (an
// overlap query per Select, a lookup per rank) allocates nothing once warm,
// with few hits (scanned) and many (looked up).
func TestSelectWithKVDoesNotAllocate(t *testing.T) {
	reg := registry(t, spec{id: "a", prefill: []uint64{0, 16}}, spec{id: "b", prefill: []uint64{16, 0, 5}})
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []uint64{1, 2, 3, 4}
	for _, w := range []string{"a", "b", "c", "d", "e"} {
		for rank := range int32(3) {
			ev := &wire.KVEvent{Instance: "i", ID: 1, Rank: rank}
			ev.Stored[wire.Host] = prompt[:1+rank]
			if _, err := x.Apply(w, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 1)
	s.KV = x
	for _, hs := range [][]uint64{{1, 9}, prompt} { // 15 hits either way; then few
		r := &request.Snapshot{ISL: 64, Route: &request.Route{Hashes: hs}}
		s.Select(reg, r)
		if got := testing.AllocsPerRun(100, func() { s.Select(reg, r) }); got != 0 {
			t.Errorf("hashes %v: Select allocs: got %v, want 0", hs, got)
		}
	}
	x.DropWorker("c")
	x.DropWorker("d")
	x.DropWorker("e")
	x.DropWorker("b")
	r := &request.Snapshot{ISL: 64, Route: &request.Route{Hashes: prompt}} // 3 hits: scanned
	s.Select(reg, r)
	if got := testing.AllocsPerRun(100, func() { s.Select(reg, r) }); got != 0 {
		t.Errorf("few hits: Select allocs: got %v, want 0", got)
	}
}

// TestIndexedSelectDoesNotAllocate: the indexed path (an unconstrained
// request) allocates nothing once warm, while bookings and releases move ranks
// between buckets of the index.
func TestIndexedSelectDoesNotAllocate(t *testing.T) {
	var specs []spec
	for i := range 20 { // enough workers for the index (16 or more)
		specs = append(specs, spec{id: fmt.Sprintf("w%02d", i), prefill: []uint64{0, 16, uint64(i)}})
	}
	reg := registry(t, specs...)
	s := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 1)
	r := &request.Snapshot{ISL: 16, Cost: 16}
	cycle := func() {
		ch, code := s.Select(reg, r)
		if code != "" {
			t.Fatalf("Select: %s", code)
		}
		reg.Unbook(ch.Worker, reg.Book(0, ch.Worker, ch.Rank, r.Cost))
	}
	for range 100 {
		cycle()
	}
	if got := testing.AllocsPerRun(100, cycle); got != 0 {
		t.Errorf("Select, Book, Unbook allocs: got %v, want 0", got)
	}
}
