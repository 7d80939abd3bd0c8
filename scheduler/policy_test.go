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

// reorderPolicy is one class whose queue_policy and min_share the tests
// below change live (%s: extra fields of the class).
const reorderPolicy = `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: small}
policy_classes:
  - {name: premium, policy_family: regular, cache_bucket: small, quantum: 512, prefill_busy_threshold: 1000%s}
`

// TestPolicyReorderKeepsStanding: a live change of queue_policy orders the
// queued requests again and keeps every key's standing (docs/design.md,
// Live policy: a class kept keeps its queue; Fairness keys: blocked keys
// keep their standing). Key A waits pinned to a busy worker while B is
// served four times: A keeps the credit of its wait.
func TestPolicyReorderKeepsStanding(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(reorderPolicy, ""), filters.Thresholds{})
	f.report("w1", 2000)
	f.report("w2", 2000)
	pin := func(key, w string) func(*request.Arrival) {
		return func(a *request.Arrival) { a.Key, a.Pin = key, request.Target{Worker: w, Rank: request.AnyRank} }
	}
	for range 3 {
		f.wantKind(f.arrive("premium", 400, pin("A", "w2")), Queued)
	}
	for range 6 {
		f.wantKind(f.arrive("premium", 100, pin("B", "w1")), Queued)
	}
	f.report("w1", 0)
	for range 4 {
		d := f.s.Next(f.now)
		f.wantKind(d, Dispatch)
		f.s.Settle(d.Worker, Completion{Seq: d.Seq, RequestID: d.Req.ID, PrefillTokens: 100})
		f.report("w1", 0)
	}
	c := f.s.Class(0)
	va, _ := c.Service("A")
	vb, _ := c.Service("B")
	f.s.SetPolicy(f.now, mustPolicy(t, fmt.Sprintf(reorderPolicy, ", queue_policy: wspt")))
	c = f.s.Class(0)
	va2, _ := c.Service("A")
	vb2, _ := c.Service("B")
	if va2 != va || vb2 != vb || c.Len() != 5 {
		t.Fatalf("after the change: A %v, B %v, %d queued; want A %v, B %v kept and 5 queued", va2, vb2, c.Len(), va, vb)
	}
}

// TestPolicyFloorShareChangeApplies: a live change of a tier's min_share
// applies to a key that stays tracked (here it is owed a settlement): with
// tier 0's share raised from 0.1 to 0.5 while key K has both tiers
// backlogged, tier 0 gets half of the next dispatches (docs/design.md, Tier
// floors).
func TestPolicyFloorShareChangeApplies(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(reorderPolicy, ", min_share: {0: 0.1}"), filters.Thresholds{})
	tier := func(n uint32) func(*request.Arrival) { return func(a *request.Arrival) { a.Key, a.Strict = "K", n } }
	f.report("w1", 2000)
	f.wantKind(f.arrive("premium", 100, tier(1)), Queued)
	f.report("w1", 0)
	f.wantKind(f.s.Next(f.now), Dispatch) // arbitrated and charged, owed its record: K stays tracked
	f.report("w1", 2000)
	for range 40 {
		f.wantKind(f.arrive("premium", 100, tier(1)), Queued)
		f.wantKind(f.arrive("premium", 100, tier(0)), Queued)
	}
	f.s.SetPolicy(f.now, mustPolicy(t, fmt.Sprintf(reorderPolicy, ", min_share: {0: 0.5}")))
	tier0 := 0
	for range 20 {
		f.report("w1", 0)
		d := f.s.Next(f.now)
		f.wantKind(d, Dispatch)
		if d.Req.Strict == 0 {
			tier0++
		}
	}
	if tier0 < 9 || tier0 > 11 {
		t.Fatalf("tier 0 got %d of 20 dispatches after its share went to 0.5, want 10 +- 1", tier0)
	}
}
