package e2e

import (
	"context"
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

// httpShares runs the clients and returns the completions per tenant among
// the first n, and the order.
func httpShares(t *testing.T, r *gwRig, clients map[string]string, n int) map[string]int {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
		for range 64 {
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
			r := startGatewayRig(t, gwOptions{policy: policy(t, "gateway-keys", "extra", tc.weights), worker: gwFleet(), tenants: []gwTenant{
				{name: "heavy", classes: "[c]", extra: "max_concurrent: 100"},
				{name: "light", classes: "[c]", extra: "max_concurrent: 100"},
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
	r := startGatewayRig(t, gwOptions{policy: policy(t, "gateway-classes"), worker: gwFleet(), tenants: []gwTenant{
		{name: "gold", classes: "[premium]", extra: "max_concurrent: 100"},
		{name: "basic", classes: "[regular]", extra: "max_concurrent: 100"},
	}})
	got := httpShares(t, r, map[string]string{"gold": "", "basic": ""}, 400)
	t.Logf("of the first 400 completions: premium (gold) %d, regular (basic) %d", got["gold"], got["basic"])
	if g := got["gold"]; g < 300 || g > 340 {
		t.Errorf("premium got %d of 400, want 320 +- 20 (quanta 512:128)", g)
	}
}
