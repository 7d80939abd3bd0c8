package main

import (
	"math"
	"testing"
	"time"

	"fairdispatch/loadgen"
)

func TestWaterFill(t *testing.T) {
	for _, c := range []struct {
		capacity float64
		w, d     []float64
		want     []float64
	}{
		{90, []float64{1, 1, 1}, []float64{100, 100, 100}, []float64{30, 30, 30}},
		// The flood: a small tenant gets all it asks, the rest is split.
		{100, []float64{1, 1, 1, 1}, []float64{44, 33, 22, 11}, []float64{34, 33, 22, 11}},
		{100, []float64{3, 1}, []float64{100, 100}, []float64{75, 25}},
		{100, []float64{3, 1}, []float64{10, 100}, []float64{10, 90}},
		{10, []float64{1, 1}, []float64{0, 100}, []float64{0, 10}},
	} {
		got := waterFill(c.capacity, c.w, c.d)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-6 {
				t.Errorf("waterFill(%v, %v, %v): got %v, want %v", c.capacity, c.w, c.d, got, c.want)
				break
			}
		}
	}
}

// A backlogged window in which the queue served arrivals in order: the
// small tenants got their arrival share, not their fair share (they asked
// for less than an equal split), and the index shows it; a fair split
// passes.
func TestTenantFairness(t *testing.T) {
	t0 := time.Unix(100, 0)
	// Two engines, so the backlog threshold is 4 waiting requests. Twenty
	// requests arrive at once (a 4:1 split of t1 and t2), then one every 10
	// ms; the fleet starts one every 12 ms in arrival order.
	var cs []loadgen.Completion
	for i := range 60 {
		pub := t0
		if i >= 20 {
			pub = t0.Add(time.Duration(i-20) * 10 * time.Millisecond)
		}
		tenant := "t1"
		if i%5 == 4 {
			tenant = "t2"
		}
		start := t0.Add(time.Duration(i) * 12 * time.Millisecond)
		cs = append(cs, loadgen.Completion{Tenant: tenant, PublishedAt: pub, StartedAt: start, FinishedAt: start.Add(time.Millisecond), PrefillTokens: 1000})
	}
	f := tenantFairness(cs, t0, 1000, 2, map[string]float64{"t1": 1, "t2": 1}) // 1000x: the window lasts minutes
	if f == nil {
		t.Fatal("no backlogged window")
	}
	if f.To <= f.From || len(f.Tenants) != 2 {
		t.Fatalf("window %v to %v, tenants %+v", f.From, f.To, f.Tenants)
	}
	// FCFS serves t2 a fifth; its demand is a fifth of the arrivals, under
	// an equal split, so its fair share is all of its demand.
	t2 := f.Tenants[1]
	if t2.Key != "t2" || t2.Service >= t2.Fair || f.MaxDev < 0.05 || f.Jain > 0.999 {
		t.Errorf("in-order service: got t2 service %v fair %v, max dev %v, Jain %v; want t2 short of its share", t2.Service, t2.Fair, f.MaxDev, f.Jain)
	}
	// Without a backlog (each request starts as it arrives) there is no window.
	for i := range cs {
		cs[i].StartedAt = cs[i].PublishedAt
	}
	if f := tenantFairness(cs, t0, 1000, 2, nil); f != nil {
		t.Errorf("no backlog: got window %v to %v", f.From, f.To)
	}
}

func TestQuantileNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := quantile(xs, 0.5); got != 3 {
		t.Errorf("median: got %v, want 3", got)
	}
	if got := quantile(xs, 0.99); got != 5 {
		t.Errorf("p99: got %v, want 5", got)
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("empty: got %v", got)
	}
}
