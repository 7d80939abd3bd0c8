package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/wire"
)

// TestEngineSettlement is issue 24's acceptance 5: two tenants of one class
// with equal weights, both backlogged at the dispatcher; tenant "cached"
// sends prompts whose first 80% (a shared document of 25 blocks) the
// engine holds in its prefix cache, tenant "fresh" prompts of the same
// length that share nothing. The dispatcher charges each request its
// input length (no index: it cannot know what the engine caches), and the
// engine worker's completion records settle the real cost from the
// engine's usage (prompt_tokens - prompt_tokens_details.cached_tokens).
// Over the dispatches made while both tenants had requests queued, the
// uncached tokens the engine computed split between them as their weights
// (1:1), within 5 points.
func TestEngineSettlement(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	p := startDispatcher(t, ns.URL(), "--leader-election=false", "--policy-config", policyFile(t, "shares"))
	fe := startFleet(t, nc, 1, fakeengine.Config{MaxNumSeqs: 4, NumGPUBlocks: 100000, PromptTokensDetails: true,
		PrefillTokensPerSec: 1e6, DecodePerToken: time.Millisecond}, engineworker.Config{})[0]
	fe.w.SetDraining(true) // the backlog forms before anything is taken
	waitFor(t, 10*time.Second, "the dispatcher sees the worker live and draining", func() bool {
		v, ok := workerView(p, fe.id)
		return ok && v.Draining
	})

	// The shared document: 25 blocks of 16 tokens with the chat template's
	// BOS and system marker: its blocks are cached once the engine saw it.
	doc := make([]string, 400-2)
	for i := range doc {
		doc[i] = fmt.Sprintf("doc%d", i)
	}
	r := rand.New(rand.NewPCG(5, 24))
	words := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = fmt.Sprintf("x%d", r.IntN(1<<30))
		}
		return strings.Join(w, " ")
	}
	prompt := func(tenant string) []fakeengine.Message {
		if tenant == "cached" { // 400 tokens cached of 500
			return []fakeengine.Message{{Role: "system", Content: strings.Join(doc, " ")}, {Role: "user", Content: words(96)}}
		}
		return []fakeengine.Message{{Role: "system", Content: words(398)}, {Role: "user", Content: words(96)}}
	}
	if _, err := engineworker.Call(t.Context(), http.DefaultClient, "http://"+fe.addr, "chat.completions",
		chatRequest(prompt("cached"), 1, false, false), -1, func([]byte) error { return nil }); err != nil {
		t.Fatal(err) // warms the engine's cache with the document
	}

	var mu sync.Mutex
	var order []string // request ids in dispatch order
	records := map[string]wire.Completion{}
	subscribe(t, nc, "dispatch.work."+fe.id, func(m *nats.Msg) { // a copy of every dispatch
		id := dispatchHeader(t, m).Get(wire.HeaderRequestID)
		mu.Lock()
		if len(order) == 0 || order[len(order)-1] != id {
			order = append(order, id)
		}
		mu.Unlock()
	})
	onCompletion(t, nc, "dispatch.done."+fe.id, func(c wire.Completion) {
		mu.Lock()
		records[c.RequestID] = c
		mu.Unlock()
	})

	const perTenant = 150
	c := newRespCaller(t, nc)
	tenantOf := map[string]string{}
	var calls []*respCall
	for i := range 2 * perTenant {
		tenant := []string{"cached", "fresh"}[i%2]
		id := fmt.Sprintf("%s-%d", tenant, i/2)
		msgs := prompt(tenant)
		h := chatHeader(tenant, msgs)
		h.Del(wire.HeaderBlockHashes) // no index: the dispatcher charges the input length
		calls = append(calls, c.start(id, "c", h, chatRequest(msgs, 4, true, false)))
		tenantOf[id] = tenant
	}
	waitQueued(t, p, 2*perTenant, 30*time.Second)
	fe.w.SetDraining(false)
	for _, call := range calls {
		if err := call.wait(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "every completion record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(records) == 2*perTenant
	})
	mu.Lock()
	defer mu.Unlock()
	// The window: up to the dispatch that empties the first tenant's backlog.
	left := map[string]int{"cached": perTenant, "fresh": perTenant}
	served := map[string]uint64{}
	cachedTokens := map[string]uint64{}
	prompts := map[string]uint64{}
	n := 0
	for _, id := range order {
		tn := tenantOf[id]
		rec := records[id]
		served[tn] += rec.PrefillTokens
		cachedTokens[tn] += rec.CachedTokens
		prompts[tn] += rec.PrefillTokens + rec.CachedTokens
		n++
		if left[tn]--; left[tn] == 0 {
			break
		}
	}
	share := float64(served["cached"]) / float64(served["cached"]+served["fresh"])
	t.Logf("over %d dispatches while both were backlogged: uncached tokens cached %d fresh %d (share of cached %.3f); cached part of the prompts: cached %.2f fresh %.2f",
		n, served["cached"], served["fresh"], share,
		float64(cachedTokens["cached"])/float64(prompts["cached"]), float64(cachedTokens["fresh"])/float64(prompts["fresh"]))
	if share < 0.45 || share > 0.55 {
		t.Fatalf("tenant cached got %.3f of the uncached tokens, want 0.50 +- 0.05", share)
	}
	if fr := float64(cachedTokens["cached"]) / float64(prompts["cached"]); fr < 0.75 || fr > 0.85 {
		t.Fatalf("tenant cached's prompts were %.2f cached, want about 0.8: the workload is wrong", fr)
	}
}
