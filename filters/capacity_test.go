package filters_test

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// TestCapacityFullRank: a rank at max_active_requests (reported plus booked)
// is busy for every gate, even one without a threshold, and never chosen,
// though it is the cheapest; a worker whose every rank is full is overloaded,
// and a pin to a full rank is pinned_worker_overloaded.
func TestCapacityFullRank(t *testing.T) {
	s := spec{id: "w", prefill: []uint64{0, 5000}, reqs: []uint64{2, 0}}
	r := s.report()
	r.MaxActive = 2
	reg := workers.New()
	w, _, _ := reg.Apply(0, r)
	gate := filters.Gate{} // no threshold
	if !gate.Busy(w, w.Rank(0)) || gate.Busy(w, w.Rank(1)) {
		t.Fatalf("busy: rank 0 %v, rank 1 %v; want true (full), false", gate.Busy(w, w.Rank(0)), gate.Busy(w, w.Rank(1)))
	}
	sel := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 1)
	for range 20 {
		ch, code := sel.Select(reg, &request.Snapshot{ISL: 10, Cost: 10, Pin: request.Target{Rank: request.AnyRank}})
		if code != "" || ch.Rank != 1 {
			t.Fatalf("Select: rank %d, code %q; want rank 1 (rank 0 is full though idle in tokens)", ch.Rank, code)
		}
	}
	if _, code := sel.Select(reg, &request.Snapshot{ISL: 10, Cost: 10, Pin: pin("w", 0)}); code != request.PinnedWorkerOverloaded {
		t.Fatalf("pin to the full rank: code %q, want %s", code, request.PinnedWorkerOverloaded)
	}
	reg.Book(0, w, 1, 10)
	reg.Book(0, w, 1, 10)
	if !(filters.Thresholds{}).Overloaded(w) {
		t.Fatalf("every rank full: not overloaded")
	}
	if _, code := sel.Select(reg, &request.Snapshot{ISL: 10, Cost: 10, Pin: request.Target{Rank: request.AnyRank}}); code != request.AllWorkersOverloaded {
		t.Fatalf("every rank full: code %q, want %s", code, request.AllWorkersOverloaded)
	}
}
