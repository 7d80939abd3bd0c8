package configs

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	parse := func(y string) *Policy {
		t.Helper()
		p, err := Parse("t.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := parse(`default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1536, key_weights: {a: 1, c: 3}}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128}
  - {name: batch, quantum: 64}
`)
	new := parse(`default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 512, queue_policy: wspt}
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1536, key_weights: {a: 2, b: 3}}
  - {name: gold, quantum: 8}
`)
	got := strings.Join(Diff(old, new), "\n")
	want := `~ class regular: queue fcfs -> wspt, quantum 128 -> 512
~ class premium: quantum 512 -> 128, key_weights +1 -1 ~1
+ class gold (added): family -, bucket -, queue fcfs, quantum 8, busy_threshold -, busy_threshold_frac -, busy_worker_ratio -, requests/worker -, raw_isl_tokens/worker -, cached_tokens/worker -, default_key_weight 1, output_token_weight 0, key_weights 0
- class batch (removed): its queued requests are resolved again
ring order: premium, regular -> regular, premium`
	if got != want {
		t.Errorf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if d := Diff(old, old); d != nil {
		t.Errorf("Diff of a policy with itself = %q, want nil", d)
	}
	if d := Diff(nil, old); len(d) != 5 || !strings.HasPrefix(d[0], "default family: - -> regular") {
		t.Errorf("Diff from nothing = %q, want the family, the buckets and three added classes", d)
	}
}
