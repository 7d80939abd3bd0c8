package loadgen

import (
	"slices"
	"testing"
	"time"
)

func TestOrder(t *testing.T) {
	classes := []ClassCount{{Class: "p", Count: 3}, {Class: "r", Count: 1}}
	for _, tc := range []struct {
		order Order
		want  []string
	}{
		{OrderAlternating, []string{"p", "r", "p", "p"}},
		{OrderSequential, []string{"p", "p", "p", "r"}},
	} {
		if got := order(Config{Classes: classes, Order: tc.order}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.order, got, tc.want)
		}
	}
	a := order(Config{Classes: classes, Order: OrderRandom, Seed: 7})
	b := order(Config{Classes: classes, Order: OrderRandom, Seed: 7})
	if !slices.Equal(a, b) {
		t.Errorf("random with one seed: got %v and %v", a, b)
	}
	slices.Sort(a)
	if !slices.Equal(a, []string{"p", "p", "p", "r"}) {
		t.Errorf("random: got %v, want a permutation", a)
	}
}

func TestPercentiles(t *testing.T) {
	p50, p90, p99 := percentiles([]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	if p50 != 5 || p90 != 9 || p99 != 10 {
		t.Errorf("percentiles of 1..10: got %v %v %v, want 5 9 10", p50, p90, p99)
	}
}
