package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
)

func mustPolicy(t testing.TB, yaml string) *configs.Policy {
	t.Helper()
	p, err := configs.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkSetPolicy measures the apply path of a live policy change: parsing
// and validating the YAML (as the watcher does) and SetPolicy, for policies
// of growing size over 100,000 queued requests, half of them in classes the
// new policy removes (docs/design.md, Live policy).
func BenchmarkSetPolicy(b *testing.B) {
	for _, families := range []int{2, 100, 1000} {
		b.Run(fmt.Sprintf("families=%d/queued=100000", families), func(b *testing.B) {
			oldY, newY := benchPolicy(families, "a"), benchPolicy(families, "b")
			b.ReportMetric(float64(len(newY)), "yaml-bytes")
			for b.Loop() {
				b.StopTimer()
				s := New(Config{Policy: mustPolicy(b, string(oldY)), Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 1)), Grace: 1e9}, t0)
				for i := range 100000 {
					s.Arrive(t0, &request.Arrival{ID: "r", Token: fmt.Sprintf("f%d", i%families), ISL: uint64(i % 4096), Published: t0 + int64(i)})
				}
				b.StartTimer()
				p, err := configs.Parse("bench.yaml", newY)
				if err != nil {
					b.Fatal(err)
				}
				s.SetPolicy(t0, p)
			}
		})
	}
}

// BenchmarkSetPolicyKeyWeights measures the apply path of a policy with
// 100,000 key weights (docs/design.md, Live policy: at least 100,000 must
// apply in under a second): parsing and validating the YAML and SetPolicy on
// a scheduler holding 100,000 queued requests over 1,000 keys.
func BenchmarkSetPolicyKeyWeights(b *testing.B) {
	const keys = 100000
	y := []byte(fmt.Sprintf(keyPolicy, ""))
	y = y[:len(y)-1] // the closing brace and newline
	y = y[:len(y)-1]
	y = append(y, ", key_weights: {"...)
	for i := range keys {
		if i > 0 {
			y = append(y, ", "...)
		}
		y = fmt.Appendf(y, "tenant-%06d: %d", i, 1+i%7)
	}
	y = append(y, "}}\n"...)
	b.ReportMetric(float64(len(y)), "yaml-bytes")
	for b.Loop() {
		b.StopTimer()
		s := New(Config{Policy: mustPolicy(b, fmt.Sprintf(keyPolicy, "")), Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 1)), Grace: 1e9}, t0)
		for i := range 100000 {
			s.Arrive(t0, &request.Arrival{ID: "r", Token: "c", Key: fmt.Sprintf("tenant-%06d", i%1000), ISL: 512, Published: t0 + int64(i)})
		}
		b.StartTimer()
		p, err := configs.Parse("bench.yaml", y)
		if err != nil {
			b.Fatal(err)
		}
		s.SetPolicy(t0, p)
	}
}

// benchPolicy is a policy of n families over two buckets; the "b" variant
// renames every small-bucket class (so that its requests move) and doubles
// every quantum.
func benchPolicy(n int, variant string) []byte {
	y := []byte("default_policy_family: f0\nuncached_isl_buckets:\n  - {min_tokens: 0, bucket: small}\n  - {min_tokens: 2048, bucket: large}\npolicy_classes:\n")
	q := 128
	if variant == "b" {
		q = 256
	}
	for i := range n {
		y = fmt.Appendf(y, "  - {name: f%d-small-%s, policy_family: f%d, cache_bucket: small, quantum: %d, prefill_busy_threshold: 1000}\n", i, variant, i, q)
		y = fmt.Appendf(y, "  - {name: f%d-large, policy_family: f%d, cache_bucket: large, quantum: %d, queue_policy: wspt, prefill_busy_threshold: 1000}\n", i, i, q)
	}
	return y
}

// keyPolicy is one class whose key weights are a parameter.
const keyPolicy = `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000000000%s}
`
