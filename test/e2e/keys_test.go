package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// keysArm runs ten tenants over NATS (docs/design.md, Fairness keys): "flood"
// publishes 300 requests first, then nine others 30 each, all 512 tokens; the
// whole backlog is queued at the dispatcher before one mock worker (four
// sequences) starts taking work. With keys, each request carries its tenant in
// Dispatch-Fairness-Key; without, none does. It returns how many of the first
// 200 completions each tenant got.
func keysArm(t *testing.T, withKeys bool) map[string]int {
	t.Helper()
	f := startFixture(t, "--policy-config", policyFile(t, "keys"))
	p, nc, js := f.p, f.nc, f.js

	var mu sync.Mutex
	var order []string // tenants in completion order
	onCompletion(t, nc, "dispatch.done.*", func(c wire.Completion) {
		mu.Lock()
		order = append(order, c.RequestID[:len(c.RequestID)-5]) // "<tenant>-NNNN"
		mu.Unlock()
	})
	// The backlog forms before anything is taken.
	w := startDrainingMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 200000})
	waitDraining(t, p, "w1")

	tenants := []string{"flood"}
	for i := range 9 {
		tenants = append(tenants, fmt.Sprint("t", i))
	}
	total := 0
	for _, tn := range tenants {
		n := 30
		if tn == "flood" {
			n = 300
		}
		for i := range n {
			hdr := map[string]string{"Dispatch-ISL-Tokens": "512"}
			if withKeys {
				hdr["Dispatch-Fairness-Key"] = tn
			}
			publish(t, js, "dispatch.req.c", fmt.Sprintf("%s-%04d", tn, i), hdr, nil)
			total++
		}
	}
	waitQueued(t, p, total, 20*time.Second)
	w.Helper().SetDraining(false)
	waitFor(t, 60*time.Second, "200 completions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) >= 200
	})
	mu.Lock()
	defer mu.Unlock()
	got := map[string]int{}
	for _, tn := range order[:200] {
		got[tn]++
	}
	return got
}

// TestKeysFloodOverNATS is acceptance 1 end to end: while all ten tenants are
// backlogged (the first 200 completions: each of the nine has 30), each gets
// 10% +- 2%, the flooding one too. The negative control is the same run without
// the header: one FCFS order, and the flood, published first, takes them all.
func TestKeysFloodOverNATS(t *testing.T) {
	with := keysArm(t, true)
	t.Logf("first 200 completions with keys: %v", with)
	for tn, n := range with {
		if n < 16 || n > 24 {
			t.Errorf("with keys: tenant %s got %d of the first 200, want 20 +- 4 (10%% +- 2%%)", tn, n)
		}
	}
	if len(with) != 10 {
		t.Errorf("with keys: %d tenants among the first 200, want 10", len(with))
	}
	without := keysArm(t, false)
	t.Logf("first 200 completions without keys: %v", without)
	if without["flood"] <= 24 {
		t.Errorf("without keys: flood got %d of the first 200, want the fairness check (<= 24) to fail", without["flood"])
	}
}
