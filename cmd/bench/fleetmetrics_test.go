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

// queue builds completions of a queue on two engines (backlog threshold: 4
// waiting): 20 requests arrive at once, then one every 10 ms, tenant[i]
// naming request i's tenant; the fleet starts one every 12 ms, taking
// request order[k] k-th (nil: in arrival order).
func queue(tenant []string, order []int) []loadgen.Completion {
	t0 := time.Unix(100, 0)
	cs := make([]loadgen.Completion, len(tenant))
	for i := range cs {
		pub := t0
		if i >= 20 {
			pub = t0.Add(time.Duration(i-20) * 10 * time.Millisecond)
		}
		cs[i] = loadgen.Completion{Tenant: tenant[i], PublishedAt: pub, PrefillTokens: 1000}
	}
	for k := range cs {
		i := k
		if order != nil {
			i = order[k]
		}
		start := t0.Add(time.Duration(k) * 12 * time.Millisecond)
		if start.Before(cs[i].PublishedAt) {
			start = cs[i].PublishedAt
		}
		cs[i].StartedAt, cs[i].FinishedAt = start, start.Add(time.Millisecond)
	}
	return cs
}

// Served in arrival order, a 4:1 mix keeps both tenants backlogged and gives
// the heavy one four fifths: far from the equal split of their weights, and
// the light one short of its max-min due (all it asked). Served by turns
// while both wait, the split is the weights'. Without a backlog there is no
// window.
func TestTenantFairness(t *testing.T) {
	t0 := time.Unix(100, 0)
	weights := map[string]float64{"t1": 1, "t2": 1}
	mix := make([]string, 200)
	for i := range mix {
		mix[i] = "t1"
		if i%5 == 4 {
			mix[i] = "t2"
		}
	}
	f := tenantFairness(queue(mix, nil), t0, 1000, 2, weights) // 1000x: the window lasts minutes
	if f == nil {
		t.Fatal("arrival order: no backlogged window")
	}
	if len(f.Backlogged) != 2 || f.BackloggedDev < 0.5 {
		t.Errorf("arrival order: backlogged %v, their split off by %.2f; want both, about 0.6", f.Backlogged, f.BackloggedDev)
	}
	if t2 := f.Tenants[1]; t2.Key != "t2" || t2.Service >= t2.Fair || f.MaxDev < 0.05 || f.Jain > 0.999 {
		t.Errorf("arrival order: t2 service %v, due %v, max dev %.2f, Jain %.3f; want t2 short of its due", t2.Service, t2.Fair, f.MaxDev, f.Jain)
	}

	even := make([]string, 200)
	for i := range even {
		even[i] = []string{"t1", "t2"}[i%2]
	}
	byTurns := make([]int, 0, 200)
	for i := range 100 { // t1's i-th, then t2's i-th
		byTurns = append(byTurns, 2*i, 2*i+1)
	}
	if f := tenantFairness(queue(even, byTurns), t0, 1000, 2, weights); f == nil || len(f.Backlogged) != 2 || f.MaxDev > 0.05 || f.Jain < 0.99 || f.BackloggedDev > 0.05 {
		t.Errorf("by turns: got %+v, want both backlogged, within 5%%", f)
	}

	idle := queue(mix, nil)
	for i := range idle {
		idle[i].StartedAt = idle[i].PublishedAt
	}
	if f := tenantFairness(idle, t0, 1000, 2, weights); f != nil {
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
