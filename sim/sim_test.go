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
