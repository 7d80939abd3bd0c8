package loadgen

import (
	"strings"
	"testing"
)

// TestTenantPicker: the smooth weighted round robin gives each tenant its
// weight's part of every class's requests, evenly spread: a:3,b:1 gives b one
// of every four, and each class has its own turn.
func TestTenantPicker(t *testing.T) {
	ts, err := ParseTenants("a:3,b")
	if err != nil {
		t.Fatal(err)
	}
	p := newTenantPicker(ts)
	got := ""
	for range 8 {
		got += p.next("premium")
	}
	if got != "aabaaaba" {
		t.Errorf("premium: got %q, want aabaaaba: b once in every four", got)
	}
	if k := p.next("regular"); k != "a" {
		t.Errorf("regular's first: got %q, want a (its own turn)", k)
	}
	if k := newTenantPicker(nil).next("c"); k != "" {
		t.Errorf("without tenants: got %q, want no key", k)
	}
	for _, bad := range []string{"a:0", "a:x", "", "a b:1", "a,"} {
		if _, err := ParseTenants(bad); err == nil {
			t.Errorf("ParseTenants(%q): no error", bad)
		}
	}
}

// TestKeyShareBacklogged: the split is counted up to the completion of the
// first key's last request.
func TestKeyShareBacklogged(t *testing.T) {
	r := &Result{KeyRequests: map[string]int{"a": 5, "b": 2}}
	for _, k := range []string{"a", "b", "a", "", "b", "a", "a"} {
		r.Completions = append(r.Completions, Completion{Key: k})
	}
	by, n := r.KeyShareBacklogged()
	if n != 4 || by["a"] != 2 || by["b"] != 2 {
		t.Errorf("got %v over %d, want a 2 and b 2 over 4 (b's last ends it; no key skipped)", by, n)
	}
}

// TestSummaryCountsCompletionsNotOK: a completion whose record says failed
// or cancelled (an engine that refused the request) is counted and said,
// rather than passing for a request served.
func TestSummaryCountsCompletionsNotOK(t *testing.T) {
	r := &Result{Complete: true}
	for _, st := range []string{"", "ok", "failed", "cancelled"} {
		r.Completions = append(r.Completions, Completion{Status: st})
	}
	s := r.Summarize(0)
	if s.NotOK != 2 || !strings.Contains(s.String(), "2 of the completions ended failed or cancelled") {
		t.Errorf("not ok %d, summary %q; want 2, said", s.NotOK, s.String())
	}
}
