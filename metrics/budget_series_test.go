package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBudgetSeriesFollowThePolicy: a class that loses its budgets in a
// policy revision loses its throttled-keys gauge (absent for a class without
// budgets); a class removed and added again counts its new budgets' charges
// from 0, not from the old class's total.
func TestBudgetSeriesFollowThePolicy(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg, []string{"a", "b"})
	m.SetClass(0, ClassState{Budgeted: true, ThrottledKeys: 7, BudgetCharged: 1000})
	if got := value(t, reg, "fairdispatch_budget_throttled_keys", "class", "a"); got != 7 {
		t.Fatalf("throttled keys %v, want 7", got)
	}
	m.SetClasses([]string{"a", "b"})
	m.SetClass(0, ClassState{})
	if n := count(t, reg, "fairdispatch_budget_throttled_keys"); n != 0 {
		t.Errorf("after a lost its budgets: %d throttled-keys series, want 0", n)
	}
	m.SetClasses([]string{"b"})
	m.SetClasses([]string{"a", "b"})
	for _, charged := range []float64{200, 600, 900} {
		m.SetClass(0, ClassState{Budgeted: true, BudgetCharged: charged})
	}
	if got := value(t, reg, "fairdispatch_budget_tokens_charged_total", "class", "a"); got != 1900 {
		t.Errorf("budget_tokens_charged_total{class=a} = %v, want 1900 (1000, then 900 charged since a came back)", got)
	}
}
