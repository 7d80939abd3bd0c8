package scheduler

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
)

// budgetClass is one class whose key "a" has a token budget (extra is YAML
// appended to the budget mapping) and every other key none. The burst, 500
// tokens, covers the 20 ms between two chances of a dispatch on the fleet
// of the tests (a burst smaller than the refill between two chances loses
// what overflows it).
func budgetClass(rate float64, extra string) string {
	return fmt.Sprintf(`default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 0,
     key_budgets: {a: {tokens_per_second: %g, burst: 500%s}}}
`, rate, extra)
}

// plainClass is budgetClass without any budget: the negative control.
const plainClass = `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 0}
`

// backlogged keeps depth requests of cost tokens queued under each key.
func backlogged(f *vfleet, cost uint64, depth int, keys ...string) map[string]int {
	queued := map[string]int{}
	n := 0
	f.topUp = func(now int64) {
		for _, k := range keys {
			for ; queued[k] < depth; queued[k]++ {
				n++
				f.add(now, request.Arrival{ID: fmt.Sprintf("%s/%d", k, n), Token: "c", ISL: cost, Key: k}, 0)
			}
		}
	}
	prev := f.onDispatch
	f.onDispatch = func(j *vjob) {
		queued[j.d.Req.Key]--
		if prev != nil {
			prev(j)
		}
	}
	return queued
}

// servedByKey returns the tokens f serves each key in each of its first secs
// seconds, counted at each dispatch after what f.onDispatch did before.
func servedByKey(f *vfleet, secs int) map[string][]float64 {
	served := map[string][]float64{}
	prev := f.onDispatch
	f.onDispatch = func(j *vjob) {
		if prev != nil {
			prev(j)
		}
		perSecond(served, j.d.Req.Key, j.start, float64(j.actual), secs)
	}
	return served
}

// TestBudgetSplit is acceptance 1 of docs/design.md, Token budgets: key a
// with 2,000 tokens/s and key b unlimited, both backlogged, on a fleet that
// serves 10,000 tokens/s (four workers of 2,500): a gets 2,000 +- 5% in each
// second and b the rest. The negative control without the budget splits
// the fleet evenly.
func TestBudgetSplit(t *testing.T) {
	const secs = 20
	for _, tc := range []struct {
		name   string
		yaml   string
		a, b   float64 // tokens per second wanted
		budget bool
	}{
		{"budget", budgetClass(2000, ""), 2000, 8000, true},
		{"control", plainClass, 5000, 5000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, tc.yaml, 4, 2500)
			backlogged(f, 50, 40, "a", "b")
			served := servedByKey(f, secs)
			f.run(secs * 1e9)
			for s := 1; s < secs; s++ { // second 0 holds a's burst
				a, b := served["a"][s], served["b"][s]
				if math.Abs(a-tc.a) > 0.05*tc.a || math.Abs(b-tc.b) > 0.05*tc.b {
					t.Errorf("second %d: a got %.0f tokens, b %.0f; want %.0f and %.0f +- 5%%", s, a, b, tc.a, tc.b)
				}
			}
			t.Logf("a: %v", served["a"])
			t.Logf("b: %v", served["b"])
		})
	}
}

// TestBudgetWithoutBacklog: a budget holds a key to its rate when the key is
// alone and the fleet has room, so that its class never holds a backlog:
// key a sends 100 requests of 50 tokens a second, open loop, to a fleet of
// 10,000 tokens/s, and gets its 2,000 tokens/s in every second after the
// first (which holds the burst), whether its class queues or not. Without
// the budget it gets the 5,000 it asks.
func TestBudgetWithoutBacklog(t *testing.T) {
	const secs = 10
	noQueue := strings.Replace(budgetClass(2000, ""), " prefill_busy_threshold: 0,", "", 1)
	for _, tc := range []struct {
		name string
		yaml string
		want float64
	}{
		{"class queues", budgetClass(2000, ""), 2000},
		{"class does not queue", noQueue, 2000},
		{"control", plainClass, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, tc.yaml, 4, 2500)
			for i := range secs * 100 {
				f.add(vstart+int64(i)*1e7, request.Arrival{ID: fmt.Sprintf("a/%d", i), Token: "c", ISL: 50, Key: "a"}, 0)
			}
			served := servedByKey(f, secs)
			f.run(secs * 1e9)
			for s := 1; s < secs; s++ {
				if a := served["a"][s]; math.Abs(a-tc.want) > 0.05*tc.want {
					t.Errorf("second %d: a got %.0f tokens, want %.0f +- 5%%", s, a, tc.want)
				}
			}
			t.Logf("a: %v", served["a"])
		})
	}
}

// TestBudgetWorkConserving: with work_conserving and b idle, a gets the whole
// fleet; once b is backlogged again a is held to its budget.
func TestBudgetWorkConserving(t *testing.T) {
	const secs = 10
	f := newFleet(t, budgetClass(2000, ", work_conserving: true"), 4, 2500)
	served := servedByKey(f, secs)
	backlogged(f, 50, 40, "a")
	f.after(5e9, func() {
		q := backlogged(f, 50, 40, "a", "b")
		q["a"] = 40 // a is already backlogged
	})
	f.run(secs * 1e9)
	for s := range 5 {
		if a := served["a"][s]; math.Abs(a-10000) > 500 {
			t.Errorf("second %d, b idle: a got %.0f tokens, want 10000 +- 5%%", s, a)
		}
	}
	for s := 6; s < secs; s++ {
		if a := served["a"][s]; math.Abs(a-2000) > 100 {
			t.Errorf("second %d, b backlogged: a got %.0f tokens, want 2000 +- 5%%", s, a)
		}
	}
	t.Logf("a: %v", served["a"])
	t.Logf("b: %v", served["b"])
}

// TestBudgetLiveChange: a budget changed by a policy change applies at once:
// in the first second after a's budget goes from 2,000 to 4,000 tokens/s, a
// gets 4,000 +- 5%.
func TestBudgetLiveChange(t *testing.T) {
	const secs = 8
	f := newFleet(t, budgetClass(2000, ""), 4, 2500)
	backlogged(f, 50, 40, "a", "b")
	served := servedByKey(f, secs)
	f.after(4e9, func() {
		p, err := configs.Parse("new.yaml", []byte(budgetClass(4000, "")))
		if err != nil {
			t.Fatal(err)
		}
		f.s.SetPolicy(f.now, p)
	})
	f.run(secs * 1e9)
	for s := 1; s < secs; s++ {
		want := 2000.0
		if s >= 4 {
			want = 4000
		}
		if a := served["a"][s]; math.Abs(a-want) > 0.05*want {
			t.Errorf("second %d: a got %.0f tokens, want %.0f +- 5%%", s, a, want)
		}
	}
	t.Logf("a: %v", served["a"])
}

// TestBudgetQueuedWithoutALimit: a request of a budgeted key queued only so
// that an arbitration charges its budget makes no backlog, so the class's
// queue limits do not apply to it: with request_queue_limit_per_worker 0
// ("reject rather than queue") and an idle worker it is dispatched, not
// rejected as queue_full.
func TestBudgetQueuedWithoutALimit(t *testing.T) {
	f := newFixture(t, `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 0,
     request_queue_limit_per_worker: 0, default_key_budget: {tokens_per_second: 100000}}
`, filters.Thresholds{})
	f.report("w1", 0)
	d := f.arrive("c", 100, func(a *request.Arrival) { a.Key = "a" })
	f.wantKind(d, Queued)
	f.wantKind(f.s.Next(f.now), Dispatch)
}

// TestBudgetRefundedWhenSelectionRejects: a request its key's budget paid
// for at arbitration and that selection then rejects (every worker
// overloaded) ran nowhere: its budget gets the cost back.
func TestBudgetRefundedWhenSelectionRejects(t *testing.T) {
	// The class's gate (100,000 tokens) is open where the worker is
	// overloaded (over 1,000): the arbitration picks the request and
	// selection finds no worker.
	f := newFixture(t, strings.Replace(budgetClass(1000, ""), "prefill_busy_threshold: 0", "prefill_busy_threshold: 100000", 1),
		filters.Thresholds{PrefillTokens: new(uint64(1000))})
	f.report("w1", 5000)
	d := f.arrive("c", 100, func(a *request.Arrival) { a.Key = "a" })
	f.wantKind(d, Queued)
	d = f.s.Next(f.now)
	if d.Kind != Reject || d.Err.Code != request.AllWorkersOverloaded {
		t.Fatalf("got %+v, want a rejection: every worker overloaded", d)
	}
	if level, _, _, _, _ := f.s.Class(0).BudgetLevel(f.now, "a"); level != 500 {
		t.Fatalf("budget level %v after the rejection, want the full burst of 500 back", level)
	}
}
