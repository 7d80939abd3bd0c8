package configs

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// FuzzParse feeds Parse arbitrary documents. It must not panic or hang; an
// error must be a *ValidationError with at least one problem; and a nil error
// implies a usable Policy: every bound of docs/config.md, Policy YAML holds, and Resolve maps any
// token and any uncached count to a class (an explicit class's own name to that
// class, anything else to a class of the right bucket). The seed corpus is the
// example files, the invalid test file, f.Add below and
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"policy-classes.yaml", "policy-cached-uncached.yaml", "testdata/invalid.yaml"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "premium", uint64(0))
	}
	for _, doc := range []string{
		"",
		"---\n",
		"a: 1\n---\nb: 2\n",
		"default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\n" +
			"policy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 1}, {name: x, quantum: 1099511627776, queue_policy: wspt, " +
			"prefill_busy_threshold_frac: 0, busy_worker_ratio: 1}]\n",
		"default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: s}, {min_tokens: 100, bucket: l}]\n" +
			"policy_classes: [{name: cs, policy_family: f, cache_bucket: s, quantum: 1}, {name: cl, policy_family: f, cache_bucket: l, quantum: 2}]\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\npolicy_classes: *c\n",
		"default_policy_family: &f f\nuncached_isl_buckets: [{min_tokens: 0, bucket: *f}]\npolicy_classes: [{<<: {name: c}}]\n",
		"policy_classes: [{name: c, quantum: 1099511627777}]\n",
		"policy_classes: [{name: c, quantum: 1, prefill_busy_threshold_frac: .nan}]\n",
		"policy_classes: !!binary aGVsbG8=\n",
		"{default_policy_family: [1], uncached_isl_buckets: {}, policy_classes: 3}",
		"\t- x",
	} {
		f.Add([]byte(doc), "f", uint64(100))
	}
	f.Fuzz(func(t *testing.T, doc []byte, token string, uncached uint64) {
		p, err := Parse("fuzz.yaml", doc)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("got %T error %v, want a *ValidationError with problems", err, err)
			}
			if p != nil {
				t.Fatalf("got a policy and an error")
			}
			return
		}
		fuzzCheckPolicy(t, p)
		_ = p.Matrix()
		for _, tok := range []string{token, p.DefaultFamily, p.Classes[0].Name, p.Classes[len(p.Classes)-1].Name} {
			for _, u := range []uint64{0, uncached, math.MaxUint64} {
				fuzzCheckResolve(t, p, tok, u)
			}
		}
	})
}

// fuzzCheckPolicy checks the bounds of docs/config.md, Policy YAML on a policy Parse accepted.
func fuzzCheckPolicy(t *testing.T, p *Policy) {
	t.Helper()
	if len(p.Classes) == 0 || len(p.Buckets) == 0 || p.DefaultFamily == "" {
		t.Fatalf("accepted a policy with %d classes, %d buckets, default family %q", len(p.Classes), len(p.Buckets), p.DefaultFamily)
	}
	buckets := map[string]bool{}
	for i, b := range p.Buckets {
		if !fuzzToken(b.Name) || buckets[b.Name] || b.MinTokens > MaxTokens ||
			(i == 0 && b.MinTokens != 0) || (i > 0 && b.MinTokens <= p.Buckets[i-1].MinTokens) {
			t.Fatalf("accepted bucket %d %+v in %+v", i, b, p.Buckets)
		}
		buckets[b.Name] = true
	}
	names := map[string]bool{}
	cells := map[[2]string]bool{}
	families := map[string]bool{}
	for _, c := range p.Classes {
		if !c.Explicit() {
			families[c.Family] = true
		}
	}
	if !families[p.DefaultFamily] {
		t.Fatalf("accepted default family %q, not a family", p.DefaultFamily)
	}
	for i, c := range p.Classes {
		switch {
		case !fuzzToken(c.Name) || names[c.Name]:
			t.Fatalf("accepted class name %q (duplicate or not a token)", c.Name)
		case c.Quantum == 0 || c.Quantum > MaxTokens:
			t.Fatalf("accepted quantum %d", c.Quantum)
		case c.Queue != FCFS && c.Queue != WSPT:
			t.Fatalf("accepted queue policy %q", c.Queue)
		case c.PrefillBusyThreshold != nil && *c.PrefillBusyThreshold > MaxTokens:
			t.Fatalf("accepted threshold %d", *c.PrefillBusyThreshold)
		case c.PrefillBusyThresholdFrac != nil && !(*c.PrefillBusyThresholdFrac >= 0 && !math.IsInf(*c.PrefillBusyThresholdFrac, 0)):
			t.Fatalf("accepted threshold frac %v", *c.PrefillBusyThresholdFrac)
		case c.BusyWorkerRatio != nil && (!(*c.BusyWorkerRatio > 0 && *c.BusyWorkerRatio <= 1) || !c.Queues()):
			t.Fatalf("accepted busy worker ratio %v (queues %v)", *c.BusyWorkerRatio, c.Queues())
		case (c.Family == "") != (c.Bucket == ""):
			t.Fatalf("accepted class %q with family %q and bucket %q", c.Name, c.Family, c.Bucket)
		case c.Explicit() && families[c.Name]:
			t.Fatalf("accepted explicit class %q named as a family", c.Name)
		case !c.Explicit() && (!fuzzToken(c.Family) || !buckets[c.Bucket] || cells[[2]string{c.Family, c.Bucket}]):
			t.Fatalf("accepted class %q in cell (%q, %q)", c.Name, c.Family, c.Bucket)
		}
		for _, l := range []*uint64{c.RequestLimit, c.RawISLLimit, c.CachedLimit} {
			if l != nil && *l > MaxTokens {
				t.Fatalf("accepted limit %d in class %q", *l, c.Name)
			}
		}
		names[c.Name] = true
		cells[[2]string{c.Family, c.Bucket}] = !c.Explicit()
		if got := p.Index(c.Name); got != i {
			t.Fatalf("Index(%q) = %d, want %d", c.Name, got, i)
		}
	}
	for f := range families {
		for b := range buckets {
			if !cells[[2]string{f, b}] {
				t.Fatalf("accepted family %q without a class for bucket %q", f, b)
			}
		}
	}
}

// fuzzCheckResolve checks Resolve against docs/design.md, Class resolution, read naively.
func fuzzCheckResolve(t *testing.T, p *Policy, token string, uncached uint64) {
	t.Helper()
	i := p.Resolve(token, uncached)
	if i < 0 || i >= len(p.Classes) {
		t.Fatalf("Resolve(%q, %d) = %d, out of [0, %d)", token, uncached, i, len(p.Classes))
	}
	got := p.Classes[i]
	if j := p.Index(token); j >= 0 && p.Classes[j].Explicit() {
		if i != j {
			t.Fatalf("Resolve(%q, %d) = %q, want the explicit class itself", token, uncached, got.Name)
		}
		return
	}
	bucket := ""
	for _, b := range p.Buckets {
		if b.MinTokens <= uncached {
			bucket = b.Name
		}
	}
	fam := p.DefaultFamily
	for _, c := range p.Classes {
		if !c.Explicit() && c.Family == token {
			fam = token
		}
	}
	if got.Family != fam || got.Bucket != bucket {
		t.Fatalf("Resolve(%q, %d) = class %q (%q, %q), want family %q bucket %q", token, uncached, got.Name, got.Family, got.Bucket, fam, bucket)
	}
}

// fuzzToken is the subject-token rule of docs/protocol.md, written out again.
func fuzzToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == ""
}
