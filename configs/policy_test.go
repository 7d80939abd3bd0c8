package configs

import (
	"errors"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: got error %v, want nil", err)
	}
	return p
}

func mustLoad(t *testing.T, path string) *Policy {
	t.Helper()
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%q): got error %v, want nil", path, err)
	}
	return p
}

// resolveCase is one Resolve call and the class name it must give.
type resolveCase struct {
	token    string
	uncached uint64
	want     string
}

func checkResolve(t *testing.T, p *Policy, cases []resolveCase) {
	t.Helper()
	for _, tc := range cases {
		i := p.Resolve(tc.token, tc.uncached)
		if i < 0 || i >= len(p.Classes) {
			t.Errorf("Resolve(%q, %d): got index %d, want a class index", tc.token, tc.uncached, i)
			continue
		}
		if got := p.Classes[i].Name; got != tc.want {
			t.Errorf("Resolve(%q, %d): got %q, want %q", tc.token, tc.uncached, got, tc.want)
		}
	}
}

// TestEveryExampleLoads: every policy example (configs/policy-*.yaml) and
// every benchmark policy (cmd/bench/policies/*.yaml) loads.
// The only other YAML files here are the gateway's examples (gateway-*.yaml),
// which package gateway's tests load; any other name fails, so that no
// example goes unloaded.
func TestEveryExampleLoads(t *testing.T) {
	all, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range all {
		switch {
		case strings.HasPrefix(f, "policy-"):
			files = append(files, f)
		case !strings.HasPrefix(f, "gateway-"):
			t.Errorf("%s: neither a policy (policy-*.yaml) nor a gateway example (gateway-*.yaml): no test loads it", f)
		}
	}
	if len(files) < 2 {
		t.Fatalf("got %d example files, want at least the 2 seed examples", len(files))
	}
	// The benchmark's policies (cmd/bench embeds them) load too.
	bench, err := filepath.Glob("../cmd/bench/policies/*.yaml")
	if err != nil || len(bench) < 2 {
		t.Fatalf("cmd/bench/policies: %d files (%v), want its 2", len(bench), err)
	}
	files = append(files, bench...)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			p := mustLoad(t, f)
			if len(p.Classes) == 0 {
				t.Errorf("got 0 classes, want some")
			}
			if p.Matrix() == "" {
				t.Errorf("got empty Matrix, want text")
			}
		})
	}
}

func TestSeedPolicyClasses(t *testing.T) {
	p := mustLoad(t, "policy-classes.yaml")
	if p.DefaultFamily != "regular" {
		t.Errorf("DefaultFamily: got %q, want %q", p.DefaultFamily, "regular")
	}
	if got, want := len(p.Buckets), 1; got != want {
		t.Fatalf("buckets: got %d, want %d", got, want)
	}
	if got, want := p.Buckets[0], (Bucket{MinTokens: 0, Name: "all"}); got != want {
		t.Errorf("bucket 0: got %+v, want %+v", got, want)
	}
	thr, lim := uint64(1536), uint64(1024)
	want := []Class{
		{Name: "premium", Family: "premium", Bucket: "all", Queue: FCFS, Quantum: 512, PrefillBusyThreshold: &thr, RequestLimit: &lim},
		{Name: "regular", Family: "regular", Bucket: "all", Queue: FCFS, Quantum: 128, PrefillBusyThreshold: &thr, RequestLimit: &lim},
	}
	checkClasses(t, p.Classes, want)
	checkResolve(t, p, []resolveCase{
		{"premium", 0, "premium"},
		{"premium", 1 << 40, "premium"},
		{"regular", 5, "regular"},
		{"unknown", 5, "regular"},
		{"", 0, "regular"},
	})
}

func TestSeedPolicyCachedUncached(t *testing.T) {
	p := mustLoad(t, "policy-cached-uncached.yaml")
	want := []Class{
		{Name: "cached", Family: "standard", Bucket: "cached", Queue: WSPT, Quantum: 2048},
		{Name: "uncached", Family: "standard", Bucket: "uncached", Queue: FCFS, Quantum: 512},
	}
	checkClasses(t, p.Classes, want)
	checkResolve(t, p, []resolveCase{
		{"standard", 0, "cached"},
		{"standard", 100, "cached"},
		{"standard", 3071, "cached"},
		{"standard", 3072, "uncached"},
		{"standard", math.MaxUint64, "uncached"},
		{"nosuch", 100, "cached"},
		{"nosuch", 5000, "uncached"},
		// A family × bucket class's name is not a family: default family.
		{"uncached", 100, "cached"},
		{"cached", 5000, "uncached"},
	})
	for _, c := range p.Classes {
		if c.Queues() {
			t.Errorf("class %q Queues: got true, want false", c.Name)
		}
		if c.Explicit() {
			t.Errorf("class %q Explicit: got true, want false", c.Name)
		}
	}
}

func checkClasses(t *testing.T, got, want []Class) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("classes: got %d, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Family != w.Family || g.Bucket != w.Bucket || g.Queue != w.Queue || g.Quantum != w.Quantum ||
			!eqU(g.PrefillBusyThreshold, w.PrefillBusyThreshold) || !eqF(g.PrefillBusyThresholdFrac, w.PrefillBusyThresholdFrac) ||
			!eqF(g.BusyWorkerRatio, w.BusyWorkerRatio) || !eqU(g.RequestLimit, w.RequestLimit) ||
			!eqU(g.RawISLLimit, w.RawISLLimit) || !eqU(g.CachedLimit, w.CachedLimit) {
			t.Errorf("class %d: got %s, want %s", i, fmtClass(g), fmtClass(w))
		}
	}
}

func eqU(a, b *uint64) bool  { return a == nil && b == nil || a != nil && b != nil && *a == *b }
func eqF(a, b *float64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func fmtClass(c Class) string {
	return strings.Join([]string{c.Name, c.Family, c.Bucket, string(c.Queue), uintOr(&c.Quantum),
		uintOr(c.PrefillBusyThreshold), floatOr(c.PrefillBusyThresholdFrac), floatOr(c.BusyWorkerRatio),
		uintOr(c.RequestLimit), uintOr(c.RawISLLimit), uintOr(c.CachedLimit)}, "|")
}

// rich has two families, three buckets and two explicit classes.
const rich = `default_policy_family: std
uncached_isl_buckets:
  - {min_tokens: 0, bucket: s}
  - {min_tokens: 100, bucket: m}
  - {min_tokens: 1000, bucket: l}
policy_classes:
  - {name: batch, quantum: 7, queue_policy: wspt, prefill_busy_threshold_frac: 0.5, busy_worker_ratio: 0.25,
     request_queue_limit_per_worker: 3, raw_isl_token_queue_limit_per_worker: 4, cached_token_queue_limit_per_worker: 5}
  - {name: std-s, policy_family: std, cache_bucket: s, quantum: 1, prefill_busy_threshold: 0}
  - {name: std-m, policy_family: std, cache_bucket: m, quantum: 2}
  - {name: std-l, policy_family: std, cache_bucket: l, quantum: 1099511627776}
  - {name: vip-l, policy_family: vip, cache_bucket: l, quantum: 4}
  - {name: vip-s, policy_family: vip, cache_bucket: s, quantum: 5}
  - {name: vip-m, policy_family: vip, cache_bucket: m, quantum: 6}
  - {name: solo, quantum: 9}
`

func TestParseRich(t *testing.T) {
	p := mustParse(t, rich)
	half, quarter := 0.5, 0.25
	zero, three, four, five := uint64(0), uint64(3), uint64(4), uint64(5)
	want := []Class{
		{Name: "batch", Queue: WSPT, Quantum: 7, PrefillBusyThresholdFrac: &half, BusyWorkerRatio: &quarter,
			RequestLimit: &three, RawISLLimit: &four, CachedLimit: &five},
		{Name: "std-s", Family: "std", Bucket: "s", Queue: FCFS, Quantum: 1, PrefillBusyThreshold: &zero},
		{Name: "std-m", Family: "std", Bucket: "m", Queue: FCFS, Quantum: 2},
		{Name: "std-l", Family: "std", Bucket: "l", Queue: FCFS, Quantum: MaxTokens},
		{Name: "vip-l", Family: "vip", Bucket: "l", Queue: FCFS, Quantum: 4},
		{Name: "vip-s", Family: "vip", Bucket: "s", Queue: FCFS, Quantum: 5},
		{Name: "vip-m", Family: "vip", Bucket: "m", Queue: FCFS, Quantum: 6},
		{Name: "solo", Queue: FCFS, Quantum: 9},
	}
	checkClasses(t, p.Classes, want)
	for _, tc := range []struct {
		class            string
		queues, explicit bool
	}{
		{"batch", true, true},
		{"std-s", true, false}, // threshold 0 counts as set
		{"std-m", false, false},
		{"solo", false, true},
	} {
		c := p.Classes[p.Index(tc.class)]
		if got := c.Queues(); got != tc.queues {
			t.Errorf("%s Queues: got %v, want %v", tc.class, got, tc.queues)
		}
		if got := c.Explicit(); got != tc.explicit {
			t.Errorf("%s Explicit: got %v, want %v", tc.class, got, tc.explicit)
		}
	}
}

func TestResolve(t *testing.T) {
	p := mustParse(t, rich)
	checkResolve(t, p, []resolveCase{
		// Rule 1: an explicit class's name selects it, whatever the size.
		{"batch", 0, "batch"},
		{"batch", 1 << 40, "batch"},
		{"solo", 5000, "solo"},
		// Rule 2: a family's name selects the family.
		{"std", 5000, "std-l"},
		{"vip", 0, "vip-s"},
		{"vip", 99, "vip-s"},
		{"vip", 100, "vip-m"},
		{"vip", 999, "vip-m"},
		{"vip", 1000, "vip-l"},
		{"vip", math.MaxUint64, "vip-l"},
		// Rule 2: unknown token -> default family.
		{"nobody", 0, "std-s"},
		{"nobody", 150, "std-m"},
		{"nobody", 1000, "std-l"},
		// Rule 2: a family × bucket class name -> default family, not that class.
		{"vip-l", 0, "std-s"},
		{"std-l", 0, "std-s"},
		// Rule 3 at the bucket edges.
		{"", 100, "std-m"},
		{"", 1001, "std-l"},
	})
}

func TestResolveDoesNotAllocate(t *testing.T) {
	p := mustParse(t, rich)
	tokens := []string{"batch", "vip", "nobody", "vip-l"}
	allocs := testing.AllocsPerRun(100, func() {
		for i, tok := range tokens {
			p.Resolve(tok, uint64(i)*400)
		}
	})
	if allocs != 0 {
		t.Errorf("allocs per run: got %v, want 0", allocs)
	}
}

func TestIndex(t *testing.T) {
	p := mustParse(t, rich)
	for _, tc := range []struct {
		name string
		want int
	}{
		{"batch", 0},
		{"std-s", 1},
		{"solo", 7},
		{"std", -1}, // a family, not a class
		{"vip", -1}, // a family, not a class
		{"", -1},
		{"nosuch", -1},
	} {
		if got := p.Index(tc.name); got != tc.want {
			t.Errorf("Index(%q): got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestDefault(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		policy    string
		threshold *float64
		wantQueue QueuePolicy
		wantErr   string // substring; "" for success
	}{
		{"fcfs", nil, FCFS, ""},
		{"wspt", nil, WSPT, ""},
		{"fcfs", f(0), FCFS, ""},
		{"wspt", f(0.75), WSPT, ""},
		{"fcfs", f(3), FCFS, ""},
		{"", nil, "", "--queue-policy"},
		{"FCFS", nil, "", "--queue-policy"},
		{"lifo", f(1), "", "--queue-policy"},
		{"fcfs", f(-0.1), "", "--queue-threshold"},
		{"fcfs", f(math.NaN()), "", "--queue-threshold"},
		{"fcfs", f(math.Inf(1)), "", "--queue-threshold"},
		{"wspt", f(math.Inf(-1)), "", "--queue-threshold"},
	} {
		p, err := Default(tc.policy, tc.threshold)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Default(%q, %v): got error %v, want one naming %s", tc.policy, tc.threshold, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Default(%q, %v): got error %v, want nil", tc.policy, tc.threshold, err)
			continue
		}
		if p.DefaultFamily != "" || p.Buckets != nil || len(p.Classes) != 1 {
			t.Fatalf("Default: got family %q, buckets %v, %d classes; want \"\", nil, 1", p.DefaultFamily, p.Buckets, len(p.Classes))
		}
		c := p.Classes[0]
		want := Class{Name: "default", Queue: tc.wantQueue, Quantum: 1, PrefillBusyThresholdFrac: tc.threshold}
		checkClasses(t, p.Classes, []Class{want})
		if got, want := c.Queues(), tc.threshold != nil; got != want {
			t.Errorf("Queues: got %v, want %v", got, want)
		}
		if !c.Explicit() {
			t.Errorf("Explicit: got false, want true")
		}
		if tc.threshold != nil && c.PrefillBusyThresholdFrac == tc.threshold {
			t.Errorf("PrefillBusyThresholdFrac: got the caller's pointer, want a copy")
		}
		for _, tok := range []string{"default", "anything", ""} {
			if got := p.Resolve(tok, 12345); got != 0 {
				t.Errorf("Resolve(%q): got %d, want 0", tok, got)
			}
		}
		if got := p.Index("default"); got != 0 {
			t.Errorf("Index(default): got %d, want 0", got)
		}
		if got := p.Index("other"); got != -1 {
			t.Errorf("Index(other): got %d, want -1", got)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want an error matching fs.ErrNotExist", err)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		t.Errorf("got a *ValidationError, want a read error")
	}
}

func TestLoadInvalid(t *testing.T) {
	path := filepath.Join("testdata", "invalid.yaml")
	_, err := Load(path)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a *ValidationError", err)
	}
	want := path + ":10: policy_classes[0].quantum: must be > 0"
	if got := err.Error(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
