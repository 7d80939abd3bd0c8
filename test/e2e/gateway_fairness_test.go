package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"fairdispatch/gateway"
	"fairdispatch/mockworker"
)

// Fairness through HTTP (issue 23, acceptance 2): two tenants, each with 64
// concurrent streaming clients that send their next request as soon as one
// ends, against a fleet that runs 8 at once (two mock workers of four
// sequences, max_active_requests 4, so the backlog waits at the dispatcher).
// Of the first 400 completions, the heavier tenant's share follows the
// weights: key weights 3:1 in one class, or the seed's quanta 512:128 across
// two classes.
//
// The share is measured while both tenants are backlogged, as the weights
// promise it: a third tenant, hold, first fills the fleet's 8 slots with
// streams that run until they are cancelled, the 128 clients' first requests
// all queue behind them, and only then are hold's streams cancelled. Without
// that, whichever tenant's clients happened to reach the dispatcher first
// had the fleet to itself for a moment, and the split moved with the
// machine's timing.

// gwHoldTenant fills the fleet before the clients start; its streams ask
// for gwHoldTokens output tokens (200 s at the fleet's 2 ms a token), so
// that none ends before it is cancelled.
const (
	gwHoldTenant = "hold"
	gwHoldTokens = 100_000
	gwFleetSlots = 8 // gwFleet's two workers times max_active_requests
	gwClients    = 64
)

// holdFleet starts gwFleetSlots streams of tenant hold and returns once the
// dispatcher has dispatched all of them; cancelling ctx ends them.
func holdFleet(ctx context.Context, t *testing.T, r *gwRig, hc *http.Client) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"hold"}]}`, gwModel, gwHoldTokens)
	before := r.disp.metric("fairdispatch_dispatched_total")
	for range gwFleetSlots {
		go func() { _ = gateway.StreamChat(ctx, hc, r.url, "sk-"+gwHoldTenant, body, nil) }()
	}
	waitFor(t, 20*time.Second, "hold's streams dispatched", func() bool {
		return r.disp.metric("fairdispatch_dispatched_total")-before >= gwFleetSlots
	})
}

// httpShares holds the fleet, starts the clients (tenant to class header;
// "": the tenant's default), waits until all their first requests are
// queued, releases the fleet, and returns the completions per tenant among
// the first n.
func httpShares(t *testing.T, r *gwRig, clients map[string]string, n int) map[string]int {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holdCtx, release := context.WithCancel(ctx)
	defer release()
	holdFleet(holdCtx, t, r, hc)

	var mu sync.Mutex
	var order []string
	var failures []string
	body := `{"model":"` + gwModel + `","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Tell me about fairness."}]}`
	one := func(tenant, class string) error {
		var h http.Header
		if class != "" {
			h = http.Header{gateway.HeaderClass: {class}}
		}
		return gateway.StreamChat(ctx, hc, r.url, "sk-"+tenant, body, h)
	}
	var wg sync.WaitGroup
	for tenant, class := range clients {
		for range gwClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					err := one(tenant, class)
					mu.Lock()
					switch {
					case err == nil:
						order = append(order, tenant)
						if len(order) >= n {
							cancel()
						}
					case ctx.Err() == nil:
						failures = append(failures, tenant+": "+err.Error())
						cancel()
					}
					mu.Unlock()
				}
			}()
		}
	}
	queued := len(clients) * gwClients
	waitQueued(t, r.disp, queued, 30*time.Second)
	mu.Lock()
	early := len(order)
	mu.Unlock()
	if early > 0 {
		t.Fatalf("%d requests completed while hold's streams filled the fleet", early)
	}
	release()

	select {
	case <-ctx.Done():
	case <-time.After(120 * time.Second):
		t.Error("the first completions did not come within 120 s")
		cancel()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("requests failed: %v", failures[:min(5, len(failures))])
	}
	if len(order) < n {
		t.Fatalf("%d completions, want %d", len(order), n)
	}
	got := map[string]int{}
	for _, tn := range order[:n] {
		got[tn]++
	}
	return got
}

func gwFleet() mockworker.Config {
	return mockworker.Config{MaxNumSeqs: 4, MaxActiveRequests: 4, DecodePerToken: 2 * time.Millisecond}
}

func TestGatewayFairnessKeyWeights(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights string
		lo, hi  int
		control bool
	}{
		{"3:1", ", key_weights: {heavy: 3, light: 1}", 280, 320, false},
		// The negative control: equal weights, and the same check fails.
		{"1:1 control", "", 280, 320, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startGatewayRig(t, gwOptions{policy: policy(t, "gateway-keys", "extra", tc.weights), worker: gwFleet(), maxTokens: gwHoldTokens, tenants: []gwTenant{
				{name: "heavy", classes: "[c]", extra: "max_concurrent: 100"},
				{name: "light", classes: "[c]", extra: "max_concurrent: 100"},
				{name: gwHoldTenant, classes: "[c]"},
			}})
			got := httpShares(t, r, map[string]string{"heavy": "", "light": ""}, 400)
			t.Logf("of the first 400 completions: heavy %d, light %d", got["heavy"], got["light"])
			in := got["heavy"] >= tc.lo && got["heavy"] <= tc.hi
			if in == tc.control {
				t.Errorf("heavy got %d of 400; within %d..%d: %v, want %v", got["heavy"], tc.lo, tc.hi, in, !tc.control)
			}
		})
	}
}

func TestGatewayFairnessClassQuanta(t *testing.T) {
	r := startGatewayRig(t, gwOptions{policy: policy(t, "gateway-classes"), worker: gwFleet(), maxTokens: gwHoldTokens, tenants: []gwTenant{
		{name: "gold", classes: "[premium]", extra: "max_concurrent: 100"},
		{name: "basic", classes: "[regular]", extra: "max_concurrent: 100"},
		{name: gwHoldTenant, classes: "[regular]"},
	}})
	got := httpShares(t, r, map[string]string{"gold": "", "basic": ""}, 400)
	t.Logf("of the first 400 completions: premium (gold) %d, regular (basic) %d", got["gold"], got["basic"])
	if g := got["gold"]; g < 300 || g > 340 {
		t.Errorf("premium got %d of 400, want 320 +- 20 (quanta 512:128)", g)
	}
}
