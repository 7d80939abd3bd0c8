//go:build !race

package filters_test

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
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
