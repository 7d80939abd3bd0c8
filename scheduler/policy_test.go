package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
)

// livePolicy is premium and regular with the quanta as parameters, gated far
// above any load the tests build, so that every queued head is dispatchable.
const livePolicy = `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1000000000}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1000000000}
`

func mustPolicy(t testing.TB, yaml string) *configs.Policy {
	t.Helper()
	p, err := configs.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// graceFixture queues every arrival (the start-up grace) until f.now passes t0+1s.
func graceFixture(t *testing.T, policy string) *fixture {
	t.Helper()
	s := New(Config{Policy: mustPolicy(t, policy), Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(7, 7)), Grace: 1e9}, t0)
	return &fixture{t: t, s: s, now: t0}
}

// split dispatches n requests and counts them per class name.
func (f *fixture) split(n int) map[string]int {
	f.t.Helper()
	out := map[string]int{}
	for range n {
		d := f.s.Next(f.now)
		f.wantKind(d, Dispatch)
		out[f.s.Policy().Classes[d.Req.Class].Name]++
	}
	return out
}

func TestSetPolicyFlipsTheSplitAndKeepsQueuesAndDeficits(t *testing.T) {
	f := graceFixture(t, fmt.Sprintf(livePolicy, 512, 128))
	f.report("w1", 0)
	for range 200 {
		f.wantKind(f.arrive("premium", 512), Queued)
		f.wantKind(f.arrive("regular", 512), Queued)
	}
	f.now += 2e9 // the grace is over
	if got := f.split(100); got["premium"] != 80 || got["regular"] != 20 {
		t.Fatalf("split under 512:128 = %v, want premium 80 regular 20", got)
	}
	before := f.s.Stats(nil)

	ch := f.s.SetPolicy(f.now, mustPolicy(t, fmt.Sprintf(livePolicy, 128, 512)))
	if len(ch.Added)+len(ch.Removed)+ch.Moved != 0 || ch.To[0] != 0 || ch.To[1] != 1 {
		t.Fatalf("change = %+v, want both classes kept in place", ch)
	}
	after := f.s.Stats(nil)
	for k := range before {
		if before[k].Pending != after[k].Pending || before[k].Deficit != after[k].Deficit {
			t.Errorf("class %s: pending %d deficit %d before, %d and %d after; want both kept",
				before[k].Name, before[k].Pending, before[k].Deficit, after[k].Pending, after[k].Deficit)
		}
	}
	// One round may still spend what premium had earned; then 1:4.
	if got := f.split(100); got["regular"] < 78 || got["regular"] > 82 {
		t.Fatalf("split under 128:512 = %v, want regular 80 +- 2", got)
	}
}

// Negative control: without the change, the next 100 stay premium-heavy, so
// the test above can fail.
func TestSetPolicyControlWithoutChange(t *testing.T) {
	f := graceFixture(t, fmt.Sprintf(livePolicy, 512, 128))
	f.report("w1", 0)
	for range 200 {
		f.arrive("premium", 512)
		f.arrive("regular", 512)
	}
	f.now += 2e9
	f.split(100)
	if got := f.split(100); got["regular"] > 25 {
		t.Fatalf("split without a change = %v, want regular about 20", got)
	}
}

// threeClasses reorders twoClasses' ring, drops the large bucket (and so
// premium-large and regular-large), adds class gold, and turns regular to wspt.
const threeClasses = `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: gold, quantum: 64, prefill_busy_threshold: 1000}
  - {name: regular, policy_family: regular, cache_bucket: all, queue_policy: wspt, quantum: 128, prefill_busy_threshold: 1000}
  - {name: batch, quantum: 64}
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1000}
`

func TestSetPolicyRemapsReresolvesAndReorders(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000) // gated for every class with a threshold: everything queues
	dl := func(a *request.Arrival) { a.HasDeadline, a.DeadlineMs = true, 1000 }
	large := f.arrive("premium", 2000, dl) // premium-large
	regLarge := f.arrive("regular", 3000)  // regular-large: no threshold, so not queued...
	f.wantKind(regLarge, Dispatch)         // ...it is dispatched at once
	small := f.arrive("premium", 10)       // premium
	r1 := f.arrive("regular", 50)          // regular, fcfs: r1 before r2
	r2 := f.arrive("regular", 5)           // wspt would serve r2 (cost 5) first
	for _, d := range []Decision{large, small, r1, r2} {
		f.wantKind(d, Queued)
	}
	large.Req.Charged = true // as if handed back after a refusal
	// In flight: the regular-large dispatch; its class is removed.
	inFlight := regLarge.Req

	ch := f.s.SetPolicy(f.now, mustPolicy(t, threeClasses))
	if fmt.Sprint(ch.To) != "[3 -1 1 -1 2]" || fmt.Sprint(ch.Added) != "[gold]" ||
		fmt.Sprint(ch.Removed) != "[premium-large regular-large]" || ch.Moved != 1 {
		t.Fatalf("change = %+v, want To [3 -1 1 -1 2], added gold, removed premium-large regular-large, moved 1", ch)
	}
	names := map[string]int{}
	for _, c := range f.s.Stats(nil) {
		names[c.Name] = c.Pending
	}
	if names["premium"] != 2 || names["regular"] != 2 || names["gold"] != 0 || names["batch"] != 0 {
		t.Fatalf("pending after the change = %v, want premium 2 (one moved in), regular 2", names)
	}
	if large.Req.Class != 3 || small.Req.Class != 3 || r1.Req.Class != 1 || !large.Req.Charged {
		t.Fatalf("classes premium-large->%d premium->%d regular->%d, charged %v; want 3, 3, 1, still charged",
			large.Req.Class, small.Req.Class, r1.Req.Class, large.Req.Charged)
	}
	f.s.Reclass(inFlight, ch)
	if inFlight.Class != 1 {
		t.Fatalf("in-flight regular-large request reclassed to %d, want regular (1)", inFlight.Class)
	}

	// The moved request keeps its deadline, in its new class.
	var out []Decision
	out = f.s.Tick(f.now+2e9, out)
	if len(out) != 1 || out[0].Req != large.Req || out[0].Err.Code != request.Expired {
		t.Fatalf("tick after the deadline = %+v, want the moved request expired", out)
	}
	if got := f.s.Queued(3); got != 1 {
		t.Fatalf("premium queued after the expiry = %d, want 1", got)
	}

	// regular is wspt now: r2 (cost 5) before r1 (cost 50).
	f.report("w1", 0)
	var order []*request.Snapshot
	for {
		d := f.s.Next(f.now)
		if d.Kind == None {
			break
		}
		f.wantKind(d, Dispatch)
		order = append(order, d.Req)
	}
	pos := map[*request.Snapshot]int{}
	for i, r := range order {
		pos[r] = i
	}
	if len(order) != 3 || pos[r2.Req] > pos[r1.Req] {
		t.Fatalf("dispatched %d requests, r2 at %d and r1 at %d; want 3, r2 before r1 (wspt)", len(order), pos[r2.Req], pos[r1.Req])
	}
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

// splitKeys dispatches n requests and counts them per fairness key.
func (f *fixture) splitKeys(n int) map[string]int {
	f.t.Helper()
	out := map[string]int{}
	for range n {
		d := f.s.Next(f.now)
		f.wantKind(d, Dispatch)
		out[d.Req.Key]++
	}
	return out
}

func TestSetPolicyChangesKeyWeightsInPlace(t *testing.T) {
	f := graceFixture(t, fmt.Sprintf(keyPolicy, ""))
	f.report("w1", 0)
	for range 200 {
		f.arrive("c", 512, func(a *request.Arrival) { a.Key = "a" })
		f.arrive("c", 512, func(a *request.Arrival) { a.Key = "b" })
	}
	f.now += 2e9
	if got := f.splitKeys(100); got["a"] < 48 || got["a"] > 52 {
		t.Fatalf("split with equal weights = %v, want about 50:50", got)
	}
	f.s.SetPolicy(f.now, mustPolicy(t, fmt.Sprintf(keyPolicy, ", key_weights: {a: 4, b: 1}")))
	if got := f.splitKeys(100); got["a"] < 76 || got["a"] > 84 {
		t.Fatalf("split after key_weights a:4 b:1 = %v, want a about 80", got)
	}
}

// A dispatch awaiting settlement whose class is removed is owed nothing: its
// completion record settles without touching a class (before, it indexed the
// old class list), and one of a kept class whose index moved settles there.
func TestSetPolicySettlementsFollowTheClasses(t *testing.T) {
	f := graceFixture(t, fmt.Sprintf(livePolicy, 512, 128))
	f.report("w1", 0)
	f.arrive("premium", 512)
	f.arrive("regular", 512)
	f.now += 2e9
	first, second := f.s.Next(f.now), f.s.Next(f.now)
	f.wantKind(first, Dispatch)
	f.wantKind(second, Dispatch)
	// premium removed; regular moves to index 1 behind a new class.
	f.s.SetPolicy(f.now, mustPolicy(t, `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: gold, quantum: 64}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1000000000}
`))
	for _, d := range []Decision{first, second} {
		res := f.s.Settle("w1", Completion{Seq: d.Seq, RequestID: d.Req.ID, PrefillTokens: 1000})
		if res.Outcome != Settled {
			t.Fatalf("settle of %s: %v, want settled", d.Req.ID, res.Outcome)
		}
		name := f.s.Policy().Classes[max(res.Class, 0)].Name
		switch {
		case d.Req.Token == "premium" && (res.Class != -1 || res.Correction != 0):
			t.Errorf("premium's settlement: class %d correction %d, want -1 and 0 (its class is gone)", res.Class, res.Correction)
		case d.Req.Token == "regular" && (name != "regular" || res.Correction != 1000-512):
			t.Errorf("regular's settlement: class %s correction %d, want regular and 488", name, res.Correction)
		}
	}
}
