package configs_test

import (
	"fmt"

	"fairdispatch/configs"
)

func ExampleParse() {
	const doc = `default_policy_family: standard
uncached_isl_buckets:
  - {min_tokens: 0, bucket: cached}
  - {min_tokens: 3072, bucket: uncached}
policy_classes:
  - {name: interactive, quantum: 4096, prefill_busy_threshold: 2048}
  - {name: cached, policy_family: standard, cache_bucket: cached, queue_policy: wspt, quantum: 2048}
  - {name: uncached, policy_family: standard, cache_bucket: uncached, quantum: 512}
`
	p, err := configs.Parse("policy.yaml", []byte(doc))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range []struct {
		token    string
		uncached uint64
	}{
		{"interactive", 9000}, // an explicit class, by name
		{"standard", 100},     // a family: the bucket decides
		{"standard", 3072},
		{"nosuch", 5000}, // unknown: the default family
	} {
		c := p.Classes[p.Resolve(r.token, r.uncached)]
		fmt.Printf("%s/%d -> %s (queues: %v)\n", r.token, r.uncached, c.Name, c.Queues())
	}

	_, err = configs.Parse("bad.yaml", []byte(`default_policy_family: standard
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: standard, cache_bucket: all, quantum: 0}
  - {name: b, quantum: 1, colour: red}
`))
	fmt.Println(err)
	// Output:
	// interactive/9000 -> interactive (queues: true)
	// standard/100 -> cached (queues: false)
	// standard/3072 -> uncached (queues: false)
	// nosuch/5000 -> uncached (queues: false)
	// bad.yaml:4: policy_classes[0].quantum: must be > 0
	// bad.yaml:5: policy_classes[1].colour: unknown field (known: name, policy_family, cache_bucket, queue_policy, quantum, prefill_busy_threshold, prefill_busy_threshold_frac, busy_worker_ratio, request_queue_limit_per_worker, raw_isl_token_queue_limit_per_worker, cached_token_queue_limit_per_worker, key_weights, default_key_weight, output_token_weight, deadline_ms, key_deadlines_ms, shed_unreachable, default_key_budget, key_budgets, sheddable, max_preemptions, preempt_after_ms, min_share)
}
