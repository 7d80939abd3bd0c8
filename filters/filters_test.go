package filters_test

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
)

func TestUpdateLatch(t *testing.T) {
	tests := []struct {
		name      string
		threshold *float64
		totalKV   uint64
		kv, dec   uint64
		before    bool // latch before the update
		want      bool
	}{
		{"unset threshold", nil, 100, 1000, 1000, true, false},
		{"total_kv 0 never latches", f64(0.5), 0, 1000, 1000, true, false},
		{"both below", f64(0.5), 100, 10, 10, false, false},
		{"both at the limit", f64(0.5), 100, 50, 50, false, false},
		{"kv above", f64(0.5), 100, 51, 0, false, true},
		{"decode above", f64(0.5), 100, 0, 51, false, true},
		{"both above", f64(0.5), 100, 60, 60, false, true},
		{"set stays while kv above", f64(0.5), 100, 51, 10, true, true},
		{"set stays while decode above", f64(0.5), 100, 10, 51, true, true},
		{"cleared when both at the limit", f64(0.5), 100, 50, 50, true, false},
		{"cleared when both below", f64(0.5), 100, 0, 0, true, false},
		{"fractional limit, below", f64(0.333), 10, 3, 3, false, false},
		{"fractional limit, above", f64(0.333), 10, 4, 0, false, true},
		{"threshold 0, idle", f64(0), 100, 0, 0, false, false},
		{"threshold 0, one block", f64(0), 100, 1, 0, false, true},
		{"threshold above 1", f64(2), 100, 200, 200, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := registry(t, spec{id: "w", prefill: []uint64{0, 0}, totalKV: tt.totalKV,
				kv: []uint64{tt.kv, 0}, decode: []uint64{tt.dec, 0}})
			w := reg.Get("w")
			w.Ranks[0].Latch, w.Ranks[1].Latch = tt.before, true
			th := filters.Thresholds{DecodeBlocks: tt.threshold}
			th.UpdateLatch(w)
			if got := w.Ranks[0].Latch; got != tt.want {
				t.Errorf("Latch: got %v, want %v", got, tt.want)
			}
			if w.Ranks[1].Latch {
				t.Errorf("idle rank 1 Latch: got true, want false")
			}
			if got := th.RankOverloaded(w, &w.Ranks[0]); got != tt.want {
				t.Errorf("RankOverloaded: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRankOverloaded(t *testing.T) {
	tests := []struct {
		name    string
		th      filters.Thresholds
		prefill uint64
		booked  uint64
		batched uint64
		latch   bool
		want    bool
	}{
		{"no thresholds", filters.Thresholds{}, 1 << 40, 0, 0, false, false},
		{"no thresholds, latch", filters.Thresholds{}, 0, 0, 0, true, true},
		{"tokens, equal", filters.Thresholds{PrefillTokens: u64(100)}, 100, 0, 0, false, false},
		{"tokens, above", filters.Thresholds{PrefillTokens: u64(100)}, 101, 0, 0, false, true},
		{"tokens, booking pushes above", filters.Thresholds{PrefillTokens: u64(100)}, 50, 51, 0, false, true},
		{"tokens 0, idle", filters.Thresholds{PrefillTokens: u64(0)}, 0, 0, 0, false, false},
		{"frac, floor equal", filters.Thresholds{PrefillFrac: f64(0.5)}, 500, 0, 1001, false, false},
		{"frac, floor plus one", filters.Thresholds{PrefillFrac: f64(0.5)}, 501, 0, 1001, false, true},
		{"frac 0.3 of 10, 3", filters.Thresholds{PrefillFrac: f64(0.3)}, 3, 0, 10, false, false},
		{"frac 0.3 of 10, 4", filters.Thresholds{PrefillFrac: f64(0.3)}, 4, 0, 10, false, true},
		{"frac, unknown batched equal", filters.Thresholds{PrefillFrac: f64(0.0001)}, 1000, 0, 0, false, false},
		{"frac, unknown batched above", filters.Thresholds{PrefillFrac: f64(0.0001)}, 1001, 0, 0, false, true},
		{"frac 0, idle", filters.Thresholds{PrefillFrac: f64(0)}, 0, 0, 100, false, false},
		{"frac 0, one token", filters.Thresholds{PrefillFrac: f64(0)}, 1, 0, 100, false, true},
		{"both, neither", filters.Thresholds{PrefillTokens: u64(100), PrefillFrac: f64(0.5)}, 50, 0, 100, false, false},
		{"both, frac only", filters.Thresholds{PrefillTokens: u64(100), PrefillFrac: f64(0.5)}, 51, 0, 100, false, true},
		{"both, tokens only", filters.Thresholds{PrefillTokens: u64(100), PrefillFrac: f64(5)}, 101, 0, 100, false, true},
		{"latch, idle prefill", filters.Thresholds{PrefillTokens: u64(100)}, 0, 0, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, w := booked(t, spec{prefill: []uint64{tt.prefill}, batched: tt.batched}, tt.booked)
			w.Ranks[0].Latch = tt.latch
			if got := tt.th.RankOverloaded(w, &w.Ranks[0]); got != tt.want {
				t.Errorf("RankOverloaded: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWorkerOverloaded(t *testing.T) {
	th := filters.Thresholds{PrefillTokens: u64(100)}
	tests := []struct {
		name     string
		th       filters.Thresholds
		w        spec
		excluded bool
		want     bool
	}{
		{"single free rank", th, spec{prefill: []uint64{100}}, false, false},
		{"single overloaded rank", th, spec{prefill: []uint64{101}}, false, true},
		{"every rank overloaded", th, spec{prefill: []uint64{101, 500, 1000}}, false, true},
		{"one free rank keeps the worker", th, spec{prefill: []uint64{101, 500, 0}}, false, false},
		{"draining, idle", th, spec{prefill: []uint64{0, 0}, draining: true}, false, true},
		{"draining, no thresholds", filters.Thresholds{}, spec{draining: true}, false, true},
		{"excluded, idle", th, spec{prefill: []uint64{0}}, true, true},
		{"no thresholds, heavy", filters.Thresholds{}, spec{prefill: []uint64{1 << 40}}, false, false},
		{"latched ranks and a free one", filters.Thresholds{DecodeBlocks: f64(0.5)},
			spec{prefill: []uint64{0, 0}, totalKV: 100, kv: []uint64{60, 10}}, false, false},
		{"every rank latched", filters.Thresholds{DecodeBlocks: f64(0.5)},
			spec{prefill: []uint64{0, 0}, totalKV: 100, kv: []uint64{60, 0}, decode: []uint64{0, 51}}, false, true},
		{"one latched, one over tokens", filters.Thresholds{DecodeBlocks: f64(0.5), PrefillTokens: u64(100)},
			spec{prefill: []uint64{0, 101}, totalKV: 100, kv: []uint64{60, 0}}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.w.id = "w"
			reg := registry(t, tt.w)
			w := reg.Get("w")
			w.Excluded = tt.excluded
			tt.th.UpdateLatch(w)
			if got := tt.th.Overloaded(w); got != tt.want {
				t.Errorf("Overloaded: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEligible(t *testing.T) {
	reg := registry(t, spec{id: "w", taints: []string{"gpu", "zone-a"}})
	w := reg.Get("w")
	tests := []struct {
		name  string
		route *request.Route
		want  bool
	}{
		{"no route", nil, true},
		{"empty route", &request.Route{}, true},
		{"allowed", &request.Route{Allowed: []string{"x", "w"}}, true},
		{"not allowed", &request.Route{Allowed: []string{"x"}}, false},
		{"empty allow-list", &request.Route{Allowed: []string{}}, false},
		{"carries the required taint", &request.Route{Required: []string{"gpu"}}, true},
		{"carries every required taint", &request.Route{Required: []string{"zone-a", "gpu"}}, true},
		{"misses one required taint", &request.Route{Required: []string{"gpu", "zone-b"}}, false},
		{"allowed but misses a taint", &request.Route{Allowed: []string{"w"}, Required: []string{"zone-b"}}, false},
		{"preferred taint it lacks is no constraint", &request.Route{Preferred: []request.Taint{{Name: "zone-b", Weight: 5}}}, true},
		{"overlap is no constraint", &request.Route{Overlap: []request.Overlap{{Worker: "x", Tokens: 5}}}, true},
	}
	for _, tt := range tests {
		r := &request.Snapshot{Route: tt.route}
		if got := filters.Eligible(w, r); got != tt.want {
			t.Errorf("%s: Eligible: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
