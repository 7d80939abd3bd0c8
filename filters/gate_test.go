package filters_test

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

func TestGateBusy(t *testing.T) {
	tests := []struct {
		name string
		gate filters.Gate
		w    spec
		book uint64 // booked prefill on rank 0, on top of the report
		excl bool
		want bool
	}{
		{"no threshold, idle", filters.Gate{}, spec{prefill: []uint64{0}}, 0, false, false},
		{"no threshold, heavy", filters.Gate{}, spec{prefill: []uint64{1 << 40}}, 0, false, false},
		{"no threshold, draining", filters.Gate{}, spec{draining: true}, 0, false, true},
		{"no threshold, excluded", filters.Gate{}, spec{}, 0, true, true},
		{"threshold, equal is not busy", filters.Gate{Threshold: u64(100)}, spec{prefill: []uint64{100}}, 0, false, false},
		{"threshold, one above is busy", filters.Gate{Threshold: u64(100)}, spec{prefill: []uint64{101}}, 0, false, true},
		{"threshold 0, idle", filters.Gate{Threshold: u64(0)}, spec{prefill: []uint64{0}}, 0, false, false},
		{"threshold 0, one token", filters.Gate{Threshold: u64(0)}, spec{prefill: []uint64{1}}, 0, false, true},
		{"threshold, booking tips it over", filters.Gate{Threshold: u64(100)}, spec{prefill: []uint64{60}}, 41, false, true},
		{"threshold, booking to exactly", filters.Gate{Threshold: u64(100)}, spec{prefill: []uint64{60}}, 40, false, false},
		{"threshold, draining though idle", filters.Gate{Threshold: u64(100)}, spec{draining: true}, 0, false, true},
		{"threshold, excluded though idle", filters.Gate{Threshold: u64(100)}, spec{}, 0, true, true},
		{"frac, equal is not busy", filters.Gate{Frac: f64(0.5)}, spec{prefill: []uint64{500}, batched: 1000}, 0, false, false},
		{"frac, one above", filters.Gate{Frac: f64(0.5)}, spec{prefill: []uint64{501}, batched: 1000}, 0, false, true},
		{"frac real comparison below", filters.Gate{Frac: f64(0.25)}, spec{prefill: []uint64{2}, batched: 10}, 0, false, false},
		{"frac real comparison above", filters.Gate{Frac: f64(0.25)}, spec{prefill: []uint64{3}, batched: 10}, 0, false, true},
		{"frac unknown batched, equal", filters.Gate{Frac: f64(0.0001)}, spec{prefill: []uint64{1000}}, 0, false, false},
		{"frac unknown batched, above", filters.Gate{Frac: f64(0.0001)}, spec{prefill: []uint64{1001}}, 0, false, true},
		{"frac 0, idle", filters.Gate{Frac: f64(0)}, spec{prefill: []uint64{0}, batched: 100}, 0, false, false},
		{"frac 0, one token", filters.Gate{Frac: f64(0)}, spec{prefill: []uint64{1}, batched: 100}, 0, false, true},
		{"frac, draining", filters.Gate{Frac: f64(1)}, spec{draining: true, batched: 100}, 0, false, true},
		{"both, only threshold exceeded", filters.Gate{Threshold: u64(10), Frac: f64(1)}, spec{prefill: []uint64{11}, batched: 100}, 0, false, true},
		{"both, only frac exceeded", filters.Gate{Threshold: u64(1000), Frac: f64(0.1)}, spec{prefill: []uint64{11}, batched: 100}, 0, false, true},
		{"both, neither exceeded", filters.Gate{Threshold: u64(1000), Frac: f64(0.1)}, spec{prefill: []uint64{10}, batched: 100}, 0, false, false},
		{"ratio alone is no threshold", filters.Gate{Ratio: f64(0.5)}, spec{prefill: []uint64{1 << 30}}, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, w := booked(t, tt.w, tt.book)
			w.Excluded = tt.excl
			if got := tt.gate.Busy(w, w.Rank(0)); got != tt.want {
				t.Errorf("Busy: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGatesCounts(t *testing.T) {
	thr := filters.Gate{Threshold: u64(100)}
	tests := []struct {
		name      string
		gate      filters.Gate
		workers   []spec
		wantGated bool
		wantFree  int
	}{
		{"no workers is not gated", thr, nil, false, 0},
		{"one free rank", thr, []spec{{id: "a", prefill: []uint64{100}}}, false, 1},
		{"one busy rank", thr, []spec{{id: "a", prefill: []uint64{101}}}, true, 0},
		{"one free rank among busy ones", thr, []spec{
			{id: "a", prefill: []uint64{500, 500}}, {id: "b", prefill: []uint64{500, 0}}}, false, 1},
		{"every rank busy", thr, []spec{
			{id: "a", prefill: []uint64{500, 500}}, {id: "b", prefill: []uint64{500, 101}}}, true, 0},
		{"draining worker is busy", thr, []spec{{id: "a", draining: true}}, true, 0},
		{"draining plus free", thr, []spec{{id: "a", draining: true}, {id: "b"}}, false, 1},
		{"class without threshold, idle", filters.Gate{}, []spec{{id: "a", prefill: []uint64{1 << 30}}}, false, 1},
		{"class without threshold, draining", filters.Gate{}, []spec{{id: "a", draining: true}}, true, 0},
		{"ratio 0.5, 1 of 4 busy", filters.Gate{Threshold: u64(100), Ratio: f64(0.5)}, []spec{
			{id: "a", prefill: []uint64{101, 0, 0, 0}}}, false, 3},
		{"ratio 0.5, 2 of 4 busy", filters.Gate{Threshold: u64(100), Ratio: f64(0.5)}, []spec{
			{id: "a", prefill: []uint64{101, 0}}, {id: "b", prefill: []uint64{101, 0}}}, true, 2},
		{"ratio 0.5, 3 of 4 busy", filters.Gate{Threshold: u64(100), Ratio: f64(0.5)}, []spec{
			{id: "a", prefill: []uint64{101, 101, 101, 0}}}, true, 1},
		{"ratio 0.34, 1 of 3 busy", filters.Gate{Threshold: u64(100), Ratio: f64(0.34)}, []spec{
			{id: "a", prefill: []uint64{101, 0, 0}}}, false, 2},
		{"ratio 1, 2 of 3 busy", filters.Gate{Threshold: u64(100), Ratio: f64(1)}, []spec{
			{id: "a", prefill: []uint64{101, 101, 0}}}, false, 1},
		{"ratio 1, 3 of 3 busy", filters.Gate{Threshold: u64(100), Ratio: f64(1)}, []spec{
			{id: "a", prefill: []uint64{101, 101, 101}}}, true, 0},
		{"ratio, no workers", filters.Gate{Threshold: u64(100), Ratio: f64(0.5)}, nil, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := registry(t, tt.workers...)
			g := filters.NewGates(reg, []filters.Gate{tt.gate})
			for _, w := range reg.All() {
				g.Update(w)
			}
			if got := g.Gated(0); got != tt.wantGated {
				t.Errorf("Gated: got %v, want %v", got, tt.wantGated)
			}
			if got := g.Free(0); got != tt.wantFree {
				t.Errorf("Free: got %d, want %d", got, tt.wantFree)
			}
			r := &request.Snapshot{}
			if got := g.GatedFor(0, r); got != tt.wantGated {
				t.Errorf("GatedFor unconstrained: got %v, want %v", got, tt.wantGated)
			}
		})
	}
}

// TestGatesLifecycle follows one worker through load changes, bookings,
// exclusion, a reshape and removal, with two classes.
func TestGatesLifecycle(t *testing.T) {
	reg := workers.New()
	g := filters.NewGates(reg, []filters.Gate{{Threshold: u64(100)}, {Threshold: u64(1000)}})
	check := func(step string, gated0, gated1 bool, free0, free1 int) {
		t.Helper()
		if got := g.Gated(0); got != gated0 {
			t.Errorf("%s: Gated(0): got %v, want %v", step, got, gated0)
		}
		if got := g.Gated(1); got != gated1 {
			t.Errorf("%s: Gated(1): got %v, want %v", step, got, gated1)
		}
		if got := g.Free(0); got != free0 {
			t.Errorf("%s: Free(0): got %d, want %d", step, got, free0)
		}
		if got := g.Free(1); got != free1 {
			t.Errorf("%s: Free(1): got %d, want %d", step, got, free1)
		}
	}
	check("empty", false, false, 0, 0)
	apply := func(s spec) *workers.Worker {
		w, _, _ := reg.Apply(0, s.report())
		g.Update(w)
		return w
	}
	w := apply(spec{id: "a", prefill: []uint64{50, 50}})
	check("idle", false, false, 2, 2)
	g.Update(w) // idempotent
	check("updated twice", false, false, 2, 2)
	seq := reg.Book(0, w, 0, 60)
	g.Update(w)
	check("rank 0 booked over 100", false, false, 1, 2)
	reg.Book(0, w, 1, 60)
	g.Update(w)
	check("both booked over 100", true, false, 0, 2)
	reg.Unbook(w, seq)
	g.Update(w)
	check("rank 0 released", false, false, 1, 2)
	w.Excluded = true
	g.Update(w)
	check("excluded", true, true, 0, 0)
	apply(spec{id: "a", prefill: []uint64{0, 0, 2000}})
	check("reshaped to 3 ranks", false, false, 2, 2)
	apply(spec{id: "a", prefill: []uint64{2000}})
	check("reshaped to 1 busy rank", true, true, 0, 0)
	b := apply(spec{id: "b"})
	check("second worker", false, false, 1, 1)
	g.Remove(w)
	reg.Expire(1<<62, nil)
	check("a removed", false, false, 1, 1)
	g.Remove(w) // unknown: no-op
	g.Remove(b)
	check("all removed", false, false, 0, 0)
}

func TestGatedFor(t *testing.T) {
	// a: ranks 0 (busy) and 1 (free), taint t1; b: rank 0 busy, taint t2;
	// c: ranks 4 and 5 both busy, taints t1 and t2; d: draining, idle, taint t3.
	reg := registry(t,
		spec{id: "a", prefill: []uint64{500, 0}, taints: []string{"t1"}},
		spec{id: "b", prefill: []uint64{500}, taints: []string{"t2"}},
		spec{id: "c", start: 4, prefill: []uint64{500, 500}, taints: []string{"t1", "t2"}},
		spec{id: "d", taints: []string{"t3"}, draining: true},
	)
	gates := []filters.Gate{{Threshold: u64(100)}, {Threshold: u64(100), Ratio: f64(0.5)}}
	g := filters.NewGates(reg, gates)
	for _, w := range reg.All() {
		g.Update(w)
	}
	allow := func(ids ...string) *request.Route { return &request.Route{Allowed: ids} }
	require := func(ts ...string) *request.Route { return &request.Route{Required: ts} }
	tests := []struct {
		name  string
		pin   request.Target
		route *request.Route
		want  [2]bool // per class
	}{
		{"unconstrained: a's rank 1 is free", request.Target{}, nil, [2]bool{false, true}},
		{"preferred taints only is unconstrained", request.Target{}, &request.Route{Preferred: []request.Taint{{Name: "t1", Weight: 1}}}, [2]bool{false, true}},
		{"pin free rank", pin("a", 1), nil, [2]bool{false, false}},
		{"pin busy rank", pin("a", 0), nil, [2]bool{true, true}},
		{"pin any rank with one free", pin("a", request.AnyRank), nil, [2]bool{false, true}},
		{"pin any rank all busy", pin("c", request.AnyRank), nil, [2]bool{true, true}},
		{"pin rank of shifted range", pin("c", 5), nil, [2]bool{true, true}},
		{"pin draining worker", pin("d", 0), nil, [2]bool{true, true}},
		{"pin unknown worker", pin("zz", 0), nil, [2]bool{false, false}},
		{"pin rank out of range", pin("c", 0), nil, [2]bool{false, false}},
		{"pin rank just past range", pin("a", 2), nil, [2]bool{false, false}},
		{"pin not allowed", pin("b", 0), allow("a"), [2]bool{false, false}},
		{"pin allowed", pin("b", 0), allow("a", "b"), [2]bool{true, true}},
		{"pin lacking required taint", pin("b", 0), require("t1"), [2]bool{false, false}},
		{"pin carrying required taint", pin("c", 4), require("t1", "t2"), [2]bool{true, true}},
		{"allow-list busy only", request.Target{}, allow("b", "c"), [2]bool{true, true}},
		{"allow-list with a free rank", request.Target{}, allow("b", "a"), [2]bool{false, true}},
		{"allow-list a: 1 of 2 busy", request.Target{}, allow("a"), [2]bool{false, true}},
		{"allow-list of dead workers", request.Target{}, allow("x", "y"), [2]bool{false, false}},
		{"allow-list dead and busy", request.Target{}, allow("x", "b"), [2]bool{true, true}},
		{"empty allow-list", request.Target{}, &request.Route{Allowed: []string{}}, [2]bool{false, false}},
		{"allow-list d and the free rank of a", request.Target{}, allow("d", "a"), [2]bool{false, true}},
		{"allow-list b d c: none free", request.Target{}, allow("b", "d", "c"), [2]bool{true, true}},
		{"required t1: a and c", request.Target{}, require("t1"), [2]bool{false, true}},
		{"required t2: b and c", request.Target{}, require("t2"), [2]bool{true, true}},
		{"required t1 t2: c", request.Target{}, require("t1", "t2"), [2]bool{true, true}},
		{"required t3: draining d", request.Target{}, require("t3"), [2]bool{true, true}},
		{"required taint nobody has", request.Target{}, require("nope"), [2]bool{false, false}},
		{"allow-list and taint", request.Target{}, &request.Route{Allowed: []string{"a", "b"}, Required: []string{"t2"}}, [2]bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &request.Snapshot{Pin: tt.pin, Route: tt.route}
			for k := range gates {
				if got := g.GatedFor(k, r); got != tt.want[k] {
					t.Errorf("GatedFor(class %d): got %v, want %v", k, got, tt.want[k])
				}
			}
		})
	}
}
