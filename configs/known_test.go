package configs

import "testing"

// TestKnown: a token is known when it names an explicit class or a family;
// anything else (including a family x bucket class's own name) falls back to
// the default family and is unknown. The synthetic profile knows every token.
func TestKnown(t *testing.T) {
	p := mustParse(t, `default_policy_family: std
uncached_isl_buckets:
  - {min_tokens: 0, bucket: short}
  - {min_tokens: 1000, bucket: long}
policy_classes:
  - {name: std-short, policy_family: std, cache_bucket: short, quantum: 100}
  - {name: std-long, policy_family: std, cache_bucket: long, quantum: 100}
  - {name: batch, quantum: 10}
`)
	for _, tc := range []struct {
		token string
		want  bool
	}{{"std", true}, {"batch", true}, {"std-short", false}, {"nope", false}, {"", false}} {
		if got := p.Known(tc.token); got != tc.want {
			t.Errorf("Known(%q) = %v, want %v", tc.token, got, tc.want)
		}
		// Known is exactly "Resolve does not fall back".
		if !tc.want && p.Resolve(tc.token, 0) != p.Resolve("std", 0) {
			t.Errorf("Resolve(%q) does not fall back to the default family", tc.token)
		}
	}
	syn, err := Default("fcfs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !syn.Known("anything") {
		t.Error("the synthetic profile should know every token")
	}
}
