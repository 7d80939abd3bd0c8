package sim

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"fairdispatch/configs"
)

// seedPolicy is configs/policy-classes.yaml with the quanta as parameters.
func seedPolicy(t testing.TB, premium, regular int) *configs.Policy {
	t.Helper()
	pol, err := configs.Parse("sim.yaml", fmt.Appendf(nil, `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
`, premium, regular))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// seedBurst is the seed's burst: 320 premium and 320 regular 512-token
// requests published alternately, 10 µs apart, before the one worker joins.
func seedBurst() []Arrival {
	const t0 = 1_700_000_000e9
	var a []Arrival
	for i := range 640 {
		tok := []string{"premium", "regular"}[i%2]
		t := int64(t0 + i*10e3)
		a = append(a, Arrival{T: t, ID: fmt.Sprint("r", i), Token: tok, Key: "_", Published: t, ISL: 512})
	}
	return a
}

func burstRun(t *testing.T, premium, regular int) Stats {
	t.Helper()
	arr := seedBurst()
	pol := seedPolicy(t, premium, regular)
	run, err := Simulate(Config{Policy: pol, Fleet: Uniform(1, 1, 200000, 0, 0, arr[len(arr)-1].T+1e6), Seed: 1}, arr)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Dispatches) != 640 || len(run.Completions) != 640 || len(run.Rejects) != 0 {
		t.Fatalf("dispatched %d, completed %d, rejected %d; want 640, 640, 0", len(run.Dispatches), len(run.Completions), len(run.Rejects))
	}
	return Analyze(run, pol, 320)
}

// TestSeedBurstSplit: the simulated seed burst gives the seed's split
// (premium 256 +- 6 of the first 320 completions at 512:128, an even split
// at 512:512, the flip at 128:512), and the contended cost shares match the
// quantum shares.
func TestSeedBurstSplit(t *testing.T) {
	for _, c := range []struct {
		p, r             int
		firstLo, firstHi int
		share            float64
	}{{512, 128, 250, 262, 0.8}, {512, 512, 154, 166, 0.5}, {128, 512, 58, 70, 0.2}} {
		st := burstRun(t, c.p, c.r)
		pr := st.Class("premium")
		if pr == nil || pr.FirstN < c.firstLo || pr.FirstN > c.firstHi {
			t.Errorf("%d:%d: premium in the first 320 completions = %+v, want %d..%d", c.p, c.r, pr, c.firstLo, c.firstHi)
			continue
		}
		if math.Abs(pr.Share-c.share) > 0.01 || math.Abs(pr.Weight-c.share) > 1e-9 {
			t.Errorf("%d:%d: premium share %.3f weight %.3f, want %.2f", c.p, c.r, pr.Share, pr.Weight, c.share)
		}
		if st.Jain < 0.999 {
			t.Errorf("%d:%d: Jain %.4f, want ~1 (each class got its weight)", c.p, c.r, st.Jain)
		}
	}
}

// TestDeterministic: the same inputs and seed give the same run.
func TestDeterministic(t *testing.T) {
	w := Workload{Kind: "poisson", Rate: 400, Duration: 3 * time.Second, Mix: []Mix{{"premium", 1}, {"regular", 3}},
		ISL: 256, ISLMax: 1024, Keys: 20, Zipf: 1.1, Seed: 7, Start: 1e18}
	run := func() *Run {
		arr, err := Generate(w)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Simulate(Config{Policy: seedPolicy(t, 512, 128), Fleet: Uniform(2, 2, 50000, 5*time.Millisecond, 0, 1e18), Seed: 3}, arr)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(), run()
	if len(a.Dispatches) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ (or nothing dispatched: %d)", len(a.Dispatches))
	}
}

// TestGenerateZipfAndRate: a Poisson workload has about its rate, and Zipf
// keys make the first key the most frequent.
func TestGenerateZipfAndRate(t *testing.T) {
	arr, err := Generate(Workload{Kind: "poisson", Rate: 1000, Duration: 10 * time.Second, Mix: []Mix{{"a", 1}},
		ISL: 100, Keys: 10, Zipf: 1.2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(arr); n < 9500 || n > 10500 {
		t.Errorf("%d arrivals in 10 s at 1000/s, want 9500..10500", n)
	}
	count := map[string]int{}
	for _, a := range arr {
		count[a.Key]++
	}
	// P(k1) = 1 / H(10, 1.2) ≈ 1 / 2.468 ≈ 0.405.
	if f := float64(count["k1"]) / float64(len(arr)); f < 0.38 || f > 0.43 || count["k1"] <= count["k2"] || count["k2"] <= count["k10"] {
		t.Errorf("key counts %v: want k1 ≈ 40.5%% > k2 > k10", count)
	}
	b, err := Generate(Workload{Kind: "bursty", Rate: 100, Duration: 3 * time.Second, BurstPeriod: time.Second, Mix: []Mix{{"a", 1}}, ISL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 300 || b[0].T != b[99].T || b[100].T-b[0].T != int64(time.Second) {
		t.Errorf("bursty: %d arrivals, want 300 in three bursts of 100 one second apart", len(b))
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 1}, {[]float64{1, 1, 1}, 1}, {[]float64{1, 0}, 0.5}, {[]float64{2, 1}, 0.9}} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// TestBudgetRefillsWakeTheModel: a key over its token budget is served again
// when the budget refills, though no arrival or worker event falls then
// (the model waits on the scheduler's NextWake): every request is
// dispatched, at the budget's pace.
func TestBudgetRefillsWakeTheModel(t *testing.T) {
	pol, err := configs.Parse("budget.yaml", []byte(`default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 512, prefill_busy_threshold: 100000, default_key_budget: {tokens_per_second: 1000, burst: 500}}
`))
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_700_000_000e9
	var arr []Arrival
	for i := range 10 {
		arr = append(arr, Arrival{T: t0, ID: fmt.Sprint("r", i), Token: "a", Key: "k", Published: t0, ISL: 500})
	}
	run, err := Simulate(Config{Policy: pol, Fleet: Uniform(1, 1, 1e9, 0, 0, t0), Seed: 1}, arr)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Dispatches) != 10 {
		t.Fatalf("%d of 10 dispatched; want every one, as the budget refills", len(run.Dispatches))
	}
	// 500 tokens each at 1000 tokens/s after a burst of one: the last about 4.5 s in.
	if last := time.Duration(run.Dispatches[9].T - t0); last < 4*time.Second || last > 5*time.Second {
		t.Errorf("the last dispatch %v after the burst, want about 4.5 s (the budget's pace)", last)
	}
}

// TestPrefillEndIsReported: a modelled worker reports when a prefill ends,
// not only when a request completes, so that with a decode time the
// prefill gate opens as the prefills end (a real worker reports it at once).
func TestPrefillEndIsReported(t *testing.T) {
	pol := seedPolicy(t, 512, 512)
	const t0 = 1_700_000_000e9
	var arr []Arrival
	for i := range 10 {
		arr = append(arr, Arrival{T: t0, ID: fmt.Sprint("r", i), Token: "premium", Key: "_", Published: t0, ISL: 512})
	}
	// 512 tokens at 512,000 tokens/s: 1 ms of prefill each, then 1 s of decode.
	run, err := Simulate(Config{Policy: pol, Fleet: Uniform(1, 1, 512000, time.Second, 0, t0), Seed: 1}, arr)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Dispatches) != 10 {
		t.Fatalf("%d dispatched, want 10", len(run.Dispatches))
	}
	if last := time.Duration(run.Dispatches[9].T - t0); last > 100*time.Millisecond {
		t.Errorf("the tenth request dispatched %v in; want within a few ms (the prefills before it end 1 ms apart)", last)
	}
}

// TestKeyJainOverContendingKeysByWeight: the key index counts the keys that
// waited during contention, each share against its key weight's part: keys
// split 4:1 as key_weights say, and a key that only came when nothing else
// waited, give 1.
func TestKeyJainOverContendingKeysByWeight(t *testing.T) {
	pol, err := configs.Parse("keys.yaml", []byte(`default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 100, key_weights: {k1: 4, k2: 1}}
  - {name: b, policy_family: b, cache_bucket: all, quantum: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	run := &Run{}
	arrive := func(tm int64, id, cls, key string) {
		run.Arrivals = append(run.Arrivals, Arrival{T: tm, ID: id, Class: cls, Key: key, Published: tm})
	}
	dispatch := func(tm int64, id, cls, key string, cost uint64) {
		run.Dispatches = append(run.Dispatches, Dispatch{T: tm, ID: id, Class: cls, Key: key, Cost: cost})
	}
	// Contention: a's k1 and k2 and b wait together; k1 gets 4 parts of a's
	// service to k2's 1.
	for i := range 5 {
		arrive(1, fmt.Sprint("a1-", i), "a", "k1")
	}
	arrive(1, "a2", "a", "k2")
	for i := range 6 {
		arrive(1, fmt.Sprint("b-", i), "b", "_")
	}
	tm := int64(10)
	for i := range 4 {
		dispatch(tm, fmt.Sprint("a1-", i), "a", "k1", 100)
		dispatch(tm+1, fmt.Sprint("b-", i), "b", "_", 125)
		tm += 2
	}
	dispatch(tm, "a2", "a", "k2", 100)
	dispatch(tm+1, "b-4", "b", "_", 125)
	dispatch(tm+2, "a1-4", "a", "k1", 1)
	dispatch(tm+3, "b-5", "b", "_", 1)
	// Later, k3 alone, nothing else waiting.
	arrive(100, "a3", "a", "k3")
	dispatch(101, "a3", "a", "k3", 100)
	st := Analyze(run, pol, 0)
	a := st.Class("a")
	if a == nil || math.Abs(a.KeyJain-1) > 0.01 {
		t.Errorf("class a: key Jain %v (keys %+v); want 1 (k1 4 parts to k2's 1, as weighted; k3 never contended)", a.KeyJain, a.Keys)
	}
}

// TestWeightIsOfTheClassesWaitingTogether: three classes of one quantum, A
// and B backlogged together and then B and C, each pair served alike: each
// class got its due (the weight counts the classes waiting at each
// dispatch, not every class that ever contended), Jain 1.
func TestWeightIsOfTheClassesWaitingTogether(t *testing.T) {
	pol, err := configs.Parse("three.yaml", []byte(`default_policy_family: a
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: a, policy_family: a, cache_bucket: all, quantum: 100}
  - {name: b, policy_family: b, cache_bucket: all, quantum: 100}
  - {name: c, policy_family: c, cache_bucket: all, quantum: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	run := &Run{}
	pair := func(t0 int64, x, y string) {
		for i := range 4 {
			run.Arrivals = append(run.Arrivals, Arrival{T: t0, ID: fmt.Sprint(x, t0, i), Class: x, Key: "_", Published: t0},
				Arrival{T: t0, ID: fmt.Sprint(y, t0, i), Class: y, Key: "_", Published: t0})
		}
		for i := range 4 {
			tm := t0 + 10 + int64(2*i)
			run.Dispatches = append(run.Dispatches, Dispatch{T: tm, ID: fmt.Sprint(x, t0, i), Class: x, Key: "_", Cost: 100},
				Dispatch{T: tm + 1, ID: fmt.Sprint(y, t0, i), Class: y, Key: "_", Cost: 100})
		}
	}
	pair(0, "a", "b")
	pair(1000, "b", "c")
	st := Analyze(run, pol, 0)
	if math.Abs(st.Jain-1) > 0.05 {
		for _, c := range st.Classes {
			t.Logf("%s: weight %.3f share %.3f", c.Name, c.Weight, c.Share)
		}
		t.Errorf("Jain %.3f, want about 1: each pair was served alike", st.Jain)
	}
}

// TestKeyJainPairwise: keys k1 and k2 backlogged together and served alike,
// then k2 and k3 (another class backlogged throughout): each key got its due,
// key Jain 1, as for classes.
func TestKeyJainPairwise(t *testing.T) {
	pol := seedPolicy(t, 512, 512)
	run := &Run{}
	add := func(t0 int64, x, y string) {
		for i := range 4 {
			run.Arrivals = append(run.Arrivals, Arrival{T: t0, ID: fmt.Sprint(x, t0, i), Class: "premium", Key: x, Published: t0},
				Arrival{T: t0, ID: fmt.Sprint(y, t0, i), Class: "premium", Key: y, Published: t0},
				Arrival{T: t0, ID: fmt.Sprint("r", t0, i), Class: "regular", Key: "_", Published: t0})
		}
		for i := range 4 {
			tm := t0 + 10 + int64(3*i)
			run.Dispatches = append(run.Dispatches, Dispatch{T: tm, ID: fmt.Sprint(x, t0, i), Class: "premium", Key: x, Cost: 100},
				Dispatch{T: tm + 1, ID: fmt.Sprint(y, t0, i), Class: "premium", Key: y, Cost: 100},
				Dispatch{T: tm + 2, ID: fmt.Sprint("r", t0, i), Class: "regular", Key: "_", Cost: 200})
		}
	}
	add(0, "k1", "k2")
	add(1000, "k2", "k3")
	if c := Analyze(run, pol, 0).Class("premium"); c == nil || math.Abs(c.KeyJain-1) > 0.05 {
		t.Errorf("premium's key Jain %v (keys %+v), want about 1: each pair was served alike", c.KeyJain, c.Keys)
	}
}
