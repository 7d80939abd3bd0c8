package filters_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

func newSelector(sc filters.Scoring, th filters.Thresholds, seed uint64) *filters.Selector {
	return filters.NewSelector(sc, th, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
}

func TestDefaultScoring(t *testing.T) {
	got := filters.DefaultScoring()
	want := filters.Scoring{BlockSize: 16, OverlapCredit: 1, PrefillScale: 1, DecodeRequestWeight: 0, Temperature: 0}
	if got != want {
		t.Errorf("DefaultScoring: got %+v, want %+v", got, want)
	}
}

// TestSelectErrors checks the failure codes and their order (docs/design.md, Worker selection).
func TestSelectErrors(t *testing.T) {
	th := filters.Thresholds{PrefillTokens: u64(100)}
	// busy: every rank overloaded; free: not overloaded; tainted: carries "gpu";
	// ranks: dp ranks 2 and 3; drain: draining, idle.
	reg := registry(t,
		spec{id: "busy", prefill: []uint64{500}, taints: []string{"gpu"}},
		spec{id: "free", prefill: []uint64{0}},
		spec{id: "tainted", prefill: []uint64{0}, taints: []string{"gpu"}},
		spec{id: "ranks", start: 2, prefill: []uint64{500, 0}},
		spec{id: "drain", draining: true},
	)
	allow := func(ids ...string) *request.Route { return &request.Route{Allowed: ids} }
	require := func(ts ...string) *request.Route { return &request.Route{Required: ts} }
	tests := []struct {
		name  string
		pin   request.Target
		route *request.Route
		want  request.Code
	}{
		{"pin not allowed, live", pin("busy", 0), allow("free"), request.PinnedWorkerNotAllowed},
		{"pin not allowed even if not live", pin("ghost", 0), allow("free"), request.PinnedWorkerNotAllowed},
		{"pin not allowed even if rank out of range", pin("free", 9), allow("busy"), request.PinnedWorkerNotAllowed},
		{"pin not allowed even if missing taint", pin("free", 0), &request.Route{Allowed: []string{"busy"}, Required: []string{"gpu"}}, request.PinnedWorkerNotAllowed},
		{"pin not live", pin("ghost", 0), nil, request.NoEndpoints},
		{"pin not live, any rank", pin("ghost", request.AnyRank), allow("ghost"), request.NoEndpoints},
		{"pin rank below range", pin("ranks", 1), nil, request.NoEndpoints},
		{"pin rank above range", pin("ranks", 4), nil, request.NoEndpoints},
		{"pin rank out of range beats overload", pin("busy", 1), nil, request.NoEndpoints},
		{"pin missing taint", pin("free", 0), require("gpu"), request.NoEndpoints},
		{"pin missing taint beats overload", pin("busy", 0), require("gpu", "zone"), request.NoEndpoints},
		{"pin overloaded", pin("busy", 0), nil, request.PinnedWorkerOverloaded},
		{"pin overloaded, any rank", pin("busy", request.AnyRank), allow("busy"), request.PinnedWorkerOverloaded},
		{"pin draining", pin("drain", 0), nil, request.PinnedWorkerOverloaded},
		{"unpinned, nothing allowed is live", request.Target{}, allow("ghost"), request.NoEndpoints},
		{"unpinned, empty allow-list", request.Target{}, &request.Route{Allowed: []string{}}, request.NoEndpoints},
		{"unpinned, nobody has the taint", request.Target{}, require("tpu"), request.NoEndpoints},
		{"unpinned, every eligible overloaded", request.Target{}, allow("busy", "drain", "ghost"), request.AllWorkersOverloaded},
		{"unpinned, non-eligible free worker does not help", request.Target{}, require("gpu"), ""},
		{"unpinned, taint: overloaded only", request.Target{}, &request.Route{Allowed: []string{"busy", "free"}, Required: []string{"gpu"}}, request.AllWorkersOverloaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSelector(filters.DefaultScoring(), th, 1)
			ch, code := s.Select(reg, &request.Snapshot{Pin: tt.pin, Route: tt.route})
			if code != tt.want {
				t.Fatalf("Select: got code %q (choice %+v), want %q", code, ch, tt.want)
			}
			if code != "" && ch.Worker != nil {
				t.Errorf("Select: got worker %s with code %q, want none", ch.Worker.ID, code)
			}
		})
	}
	// The one success above: only "tainted" is eligible and not overloaded.
	s := newSelector(filters.DefaultScoring(), th, 1)
	ch, _ := s.Select(reg, &request.Snapshot{Route: require("gpu")})
	if ch.Worker == nil || ch.Worker.ID != "tainted" || ch.Rank != 0 {
		t.Errorf("Select with required gpu: got %+v, want tainted rank 0", ch)
	}
}

func TestSelectNoWorkers(t *testing.T) {
	s := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 1)
	if _, code := s.Select(workers.New(), &request.Snapshot{}); code != request.NoEndpoints {
		t.Errorf("Select on empty registry: got %q, want %q", code, request.NoEndpoints)
	}
}

func TestSelectAllOverloadedVsIneligible(t *testing.T) {
	th := filters.Thresholds{PrefillTokens: u64(10)}
	// "a" is eligible and overloaded; "b" is idle but not allowed.
	reg := registry(t, spec{id: "a", prefill: []uint64{11, 11}}, spec{id: "b"})
	s := newSelector(filters.DefaultScoring(), th, 1)
	if _, code := s.Select(reg, &request.Snapshot{Route: &request.Route{Allowed: []string{"a"}}}); code != request.AllWorkersOverloaded {
		t.Errorf("Select: got %q, want %q", code, request.AllWorkersOverloaded)
	}
	// Without the allow-list, b takes it.
	ch, code := s.Select(reg, &request.Snapshot{})
	if code != "" || ch.Worker.ID != "b" {
		t.Errorf("Select unconstrained: got %+v %q, want b", ch, code)
	}
	// An excluded worker is overloaded for selection.
	reg.Get("b").Excluded = true
	reg.Touch(reg.Get("b")) // a change made outside the registry
	if _, code := s.Select(reg, &request.Snapshot{}); code != request.AllWorkersOverloaded {
		t.Errorf("Select with b excluded: got %q, want %q", code, request.AllWorkersOverloaded)
	}
}

func TestSelectPinned(t *testing.T) {
	th := filters.Thresholds{PrefillTokens: u64(100)}
	// "p": ranks 4 (overloaded), 5 (load 64), 6 (idle). "q": idle, cheaper than all.
	reg := registry(t, spec{id: "p", start: 4, prefill: []uint64{500, 64, 0}}, spec{id: "q"})
	tests := []struct {
		name     string
		pin      request.Target
		wantRank int32
	}{
		{"pinned rank is taken as is", pin("p", 5), 5},
		{"pinned overloaded rank of a worker that is not overloaded", pin("p", 4), 4},
		{"any rank goes to the worker's best rank", pin("p", request.AnyRank), 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSelector(filters.DefaultScoring(), th, 1)
			ch, code := s.Select(reg, &request.Snapshot{ISL: 64, Pin: tt.pin})
			if code != "" {
				t.Fatalf("Select: got code %q, want none", code)
			}
			if ch.Worker != reg.Get("p") || ch.Rank != tt.wantRank {
				t.Errorf("Select: got %s rank %d, want p rank %d", ch.Worker.ID, ch.Rank, tt.wantRank)
			}
		})
	}
	// Any rank with a booking that makes rank 6 dearer than rank 5.
	p := reg.Get("p")
	reg.Book(0, p, 6, 100)
	s := newSelector(filters.DefaultScoring(), th, 1)
	if ch, _ := s.Select(reg, &request.Snapshot{ISL: 64, Pin: pin("p", request.AnyRank)}); ch.Rank != 5 {
		t.Errorf("Select any rank after booking rank 6: got rank %d, want 5", ch.Rank)
	}
}

func TestSelectLowestCost(t *testing.T) {
	th := filters.Thresholds{PrefillTokens: u64(1000)}
	tests := []struct {
		name     string
		sc       filters.Scoring
		workers  []spec
		route    *request.Route
		isl      uint64
		wantID   string
		wantRank int32
	}{
		{"least prefill", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{320}}, {id: "b", prefill: []uint64{160}}, {id: "c", prefill: []uint64{480}}},
			nil, 16, "b", 0},
		{"best rank across workers", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{320, 16}}, {id: "b", start: 7, prefill: []uint64{160, 32, 0}}},
			nil, 16, "b", 9},
		{"decode blocks count", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{0}, decode: []uint64{10}}, {id: "b", prefill: []uint64{64}, decode: []uint64{0}}},
			nil, 16, "b", 0},
		{"overlap credit wins", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{0}}, {id: "b", prefill: []uint64{160}}},
			&request.Route{Overlap: []request.Overlap{{Worker: "b", Tokens: 512}}}, 512, "b", 0},
		{"overlap credit too small", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{0}}, {id: "b", prefill: []uint64{160}}},
			&request.Route{Overlap: []request.Overlap{{Worker: "b", Tokens: 64}}}, 512, "a", 0},
		{"request weight", filters.Scoring{BlockSize: 16, OverlapCredit: 1, PrefillScale: 1, DecodeRequestWeight: 100}, []spec{
			{id: "a", prefill: []uint64{0}, reqs: []uint64{5}}, {id: "b", prefill: []uint64{160}, reqs: []uint64{0}}},
			nil, 16, "b", 0},
		{"preferred taint attracts", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{0}}, {id: "b", prefill: []uint64{32}, taints: []string{"fast"}}},
			&request.Route{Preferred: []request.Taint{{Name: "fast", Weight: 1}}}, 16, "b", 0},
		{"negative weight steers away", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{0}, taints: []string{"slow"}}, {id: "b", prefill: []uint64{16}}},
			&request.Route{Preferred: []request.Taint{{Name: "slow", Weight: -1}}}, 16, "b", 0},
		{"overloaded worker skipped though cheapest", filters.DefaultScoring(), []spec{
			{id: "a", prefill: []uint64{1001}}, {id: "b", prefill: []uint64{5000, 0}}},
			nil, 16, "b", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := registry(t, tt.workers...)
			s := newSelector(tt.sc, th, 7)
			for i := range 20 { // deterministic: no ties
				ch, code := s.Select(reg, &request.Snapshot{ISL: tt.isl, Route: tt.route})
				if code != "" {
					t.Fatalf("Select: got code %q, want none", code)
				}
				if ch.Worker.ID != tt.wantID || ch.Rank != tt.wantRank {
					t.Fatalf("Select #%d: got %s rank %d, want %s rank %d", i, ch.Worker.ID, ch.Rank, tt.wantID, tt.wantRank)
				}
			}
		})
	}
}

// TestSelectPerWorkerOverload documents docs/design.md, Worker selection: overload is decided per
// worker, so an overloaded rank of a worker with a free rank stays a candidate.
func TestSelectPerWorkerOverload(t *testing.T) {
	th := filters.Thresholds{DecodeBlocks: f64(0.5)}
	// Rank 0 is latched (kv_used 60 of 100) but cheapest: kv_used is not in the cost.
	reg := registry(t, spec{id: "a", prefill: []uint64{0, 64}, totalKV: 100, kv: []uint64{60, 0}})
	a := reg.Get("a")
	th.UpdateLatch(a)
	if !a.Ranks[0].Latch || th.Overloaded(a) {
		t.Fatalf("set-up: got latch %v overloaded %v, want true false", a.Ranks[0].Latch, th.Overloaded(a))
	}
	s := newSelector(filters.DefaultScoring(), th, 1)
	if ch, code := s.Select(reg, &request.Snapshot{ISL: 16}); code != "" || ch.Rank != 0 {
		t.Errorf("Select: got rank %d code %q, want rank 0", ch.Rank, code)
	}
}

// pickCounts selects n times and counts the chosen worker ids.
func pickCounts(t *testing.T, s *filters.Selector, reg *workers.Registry, r *request.Snapshot, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range n {
		ch, code := s.Select(reg, r)
		if code != "" {
			t.Fatalf("Select: got code %q, want none", code)
		}
		counts[fmt.Sprintf("%s/%d", ch.Worker.ID, ch.Rank)]++
	}
	return counts
}

func TestSelectTiesAtTemperatureZero(t *testing.T) {
	// a and c tie at the lowest cost; b is dearer; d has a tied rank and a dear one.
	reg := registry(t,
		spec{id: "a", prefill: []uint64{16}},
		spec{id: "b", prefill: []uint64{32}},
		spec{id: "c", prefill: []uint64{16}},
		spec{id: "d", prefill: []uint64{48, 16}},
	)
	const n = 6000
	s := newSelector(filters.DefaultScoring(), filters.Thresholds{}, 42)
	counts := pickCounts(t, s, reg, &request.Snapshot{ISL: 16}, n)
	for _, k := range []string{"b/0", "d/0"} {
		if counts[k] != 0 {
			t.Errorf("%s chosen %d times, want never (dearer)", k, counts[k])
		}
	}
	for _, k := range []string{"a/0", "c/0", "d/1"} {
		if got := float64(counts[k]) / n; got < 0.28 || got > 0.39 {
			t.Errorf("tied %s chosen with frequency %.3f, want about 1/3", k, got)
		}
	}
}

func TestSelectSameSeedSameSequence(t *testing.T) {
	reg := registry(t, spec{id: "a"}, spec{id: "b"}, spec{id: "c"})
	seq := func(seed uint64, temp float64) []string {
		sc := filters.DefaultScoring()
		sc.Temperature = temp
		s := newSelector(sc, filters.Thresholds{}, seed)
		var out []string
		for range 200 {
			ch, _ := s.Select(reg, &request.Snapshot{ISL: 16})
			out = append(out, ch.Worker.ID)
		}
		return out
	}
	for _, temp := range []float64{0, 1} {
		a, b := seq(3, temp), seq(3, temp)
		if !slices.Equal(a, b) {
			t.Errorf("temperature %v: same seed gave different sequences:\n%v\n%v", temp, a, b)
		}
		if c := seq(4, temp); slices.Equal(a, c) {
			t.Errorf("temperature %v: seeds 3 and 4 gave the same 200 choices, want different", temp)
		}
	}
}

func TestSelectSoftmax(t *testing.T) {
	const n = 40000
	tests := []struct {
		name    string
		temp    float64
		prefill []uint64 // per worker, one rank each; ISL 0 so cost = prefill/16
	}{
		{"costs 0 1 2 at T=1", 1, []uint64{0, 16, 32}},
		{"costs 0 1 2 at T=0.5", 0.5, []uint64{0, 16, 32}},
		{"costs 0 3 4 10 at T=2", 2, []uint64{0, 48, 64, 160}},
		{"equal costs are uniform", 1, []uint64{80, 80, 80, 80}},
		{"equal costs are uniform at T=0.01", 0.01, []uint64{8, 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var specs []spec
			for i, p := range tt.prefill {
				specs = append(specs, spec{id: fmt.Sprintf("w%d", i), prefill: []uint64{p}})
			}
			reg := registry(t, specs...)
			// Expected: softmax over -cost / (range * T).
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, p := range tt.prefill {
				c := float64(p) / 16
				lo, hi = math.Min(lo, c), math.Max(hi, c)
			}
			want := make([]float64, len(tt.prefill))
			sum := 0.0
			for i, p := range tt.prefill {
				want[i] = 1
				if hi > lo {
					want[i] = math.Exp(-(float64(p)/16 - lo) / ((hi - lo) * tt.temp))
				}
				sum += want[i]
			}
			sc := filters.DefaultScoring()
			sc.Temperature = tt.temp
			s := newSelector(sc, filters.Thresholds{}, 11)
			counts := pickCounts(t, s, reg, &request.Snapshot{}, n)
			for i := range tt.prefill {
				got := float64(counts[fmt.Sprintf("w%d/0", i)]) / n
				if w := want[i] / sum; math.Abs(got-w) > 0.02 {
					t.Errorf("w%d frequency: got %.4f, want %.4f ± 0.02", i, got, w)
				}
			}
		})
	}
}

func TestSelectTemperatureOrdersByCost(t *testing.T) {
	// At any temperature, a cheaper worker is chosen more often than a dearer one.
	reg := registry(t, spec{id: "a", prefill: []uint64{0}}, spec{id: "b", prefill: []uint64{160}})
	for _, temp := range []float64{0.1, 1, 10} {
		sc := filters.DefaultScoring()
		sc.Temperature = temp
		s := newSelector(sc, filters.Thresholds{}, 5)
		c := pickCounts(t, s, reg, &request.Snapshot{ISL: 16}, 4000)
		if c["a/0"] <= c["b/0"] {
			t.Errorf("T=%v: got a %d times, b %d times, want a more often", temp, c["a/0"], c["b/0"])
		}
	}
}
