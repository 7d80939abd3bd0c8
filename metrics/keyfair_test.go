package metrics

import (
	"math"
	"testing"
)

// TestKeyFairnessGauges: the key fairness gauges start NaN (not measured) for
// every class, take what SetKeyFairness gives, and ignore an unknown class.
func TestKeyFairnessGauges(t *testing.T) {
	m, reg := newTest(t)
	names := []string{"fairdispatch_key_fairness_jain", "fairdispatch_key_share_max_over_weight", "fairdispatch_key_share_min_over_weight"}
	for _, c := range testClasses {
		for _, n := range names {
			if v := value(t, reg, n, "class", c); !math.IsNaN(v) {
				t.Errorf("%s{class=%q} = %v before any measure, want NaN", n, c, v)
			}
		}
	}
	m.SetKeyFairness(0, KeyFairness{Jain: 0.9, MaxShareOverWeight: 1.5, MinShareOverWeight: 0.5})
	m.SetKeyFairness(len(testClasses), KeyFairness{Jain: 0.1}) // ignored
	for i, want := range []float64{0.9, 1.5, 0.5} {
		if v := value(t, reg, names[i], "class", testClasses[0]); v != want {
			t.Errorf("%s = %v, want %v", names[i], v, want)
		}
	}
	if v := value(t, reg, names[0], "class", testClasses[1]); !math.IsNaN(v) {
		t.Errorf("another class's index = %v, want NaN still", v)
	}
}
