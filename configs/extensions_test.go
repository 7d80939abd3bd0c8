package configs

import (
	"strings"
	"testing"
)

// TestExtensions reads every field of docs/config.md, Schema beyond the
// seed's, with its defaults.
func TestExtensions(t *testing.T) {
	p, err := Load("policy-budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Classes[0]
	if c.Queue != EDF || c.DeadlineMs == nil || *c.DeadlineMs != 5000 || c.KeyDeadlinesMs["acme"] != 2000 || !c.ShedUnreachable {
		t.Errorf("deadlines: got %+v", c)
	}
	if ms, _ := c.KeyDeadline("acme"); ms != 2000 {
		t.Errorf("acme's deadline: got %d, want 2000", ms)
	}
	if ms, _ := c.KeyDeadline("other"); ms != 5000 {
		t.Errorf("another key's deadline: got %d, want the class's 5000", ms)
	}
	if b := c.KeyBudget("acme"); b == nil || b.Rate != 2000 || b.Burst != 4000 || !b.WorkConserving {
		t.Errorf("acme's budget: got %+v", b)
	}
	if b := c.KeyBudget("free-tier"); b == nil || b.Rate != 500 || b.Burst != 500 || b.WorkConserving {
		t.Errorf("free-tier's budget (burst defaults to a second): got %+v", b)
	}
	if c.KeyBudget("internal") != nil || c.KeyBudget("other") != nil {
		t.Errorf("internal and other keys: want unlimited")
	}
	if c.MinShare[0] != 0.1 || c.PreemptAfterMs == nil || *c.PreemptAfterMs != 500 {
		t.Errorf("min_share, preempt_after_ms: got %+v", c)
	}
	if b := p.Classes[1]; !b.Sheddable || b.MaxPreemptions != 3 {
		t.Errorf("batch: got %+v", b)
	}
}

// TestExtensionProblems: each problem of the new fields is reported with
// its path, all at once.
func TestExtensionProblems(t *testing.T) {
	doc := `default_policy_family: c
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1, queue_policy: edf,
     deadline_ms: -1, key_deadlines_ms: {"bad key": 5}, shed_unreachable: yes please,
     default_key_budget: {burst: 0}, key_budgets: {a: {tokens_per_second: 0}, b: none},
     max_preemptions: 2, min_share: {0: 0.6, 1: 0.5, x: 0.1, 2147483648: 0.1}}
`
	_, err := Parse("p.yaml", []byte(doc))
	if err == nil {
		t.Fatal("parsed")
	}
	for _, want := range []string{
		"policy_classes[0].deadline_ms: must be a non-negative integer",
		"policy_classes[0].key_deadlines_ms: keys must be fairness keys",
		"policy_classes[0].shed_unreachable: must be true or false",
		"policy_classes[0].default_key_budget.tokens_per_second: required",
		"policy_classes[0].default_key_budget.burst: must be > 0",
		"policy_classes[0].key_budgets.a.tokens_per_second: must be in (0, 2^40]",
		`policy_classes[0].key_budgets.b: must be a budget mapping or "unlimited"`,
		"policy_classes[0].max_preemptions: only a sheddable class is preempted",
		"policy_classes[0].min_share: keys must be strict tiers (integers 0 to 2147483647, as Dispatch-Strict-Priority), got a string (\"x\")",
		"policy_classes[0].min_share: keys must be strict tiers (integers 0 to 2147483647, as Dispatch-Strict-Priority), got an integer (2147483648)",
		"policy_classes[0].min_share: the shares must add up to less than 1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
