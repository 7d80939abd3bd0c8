package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/wire"
)

// TestEngineWorkerEndToEnd is issue 24's acceptance 1 with a Go producer
// standing for the gateway (the gateway and the openai npm client are on
// branch gateway, not on main yet): a real nats-server, the dispatcher, two
// engine workers, two fake vLLM engines. 500 streaming chat requests from
// two tenants are all answered, every stream in order (the chunks numbered
// 1..n with no gap, their text the engine's tokens in order, the end
// marker after the last with the engine's usage). Then the dispatcher's
// view of an engine's load (/debug/queues) is checked against the engine's
// metrics through changes made behind the worker's back (requests sent to
// the engine directly): it follows them, and the time it takes is logged
// with the scrapes the engine served meanwhile.
func TestEngineWorkerEndToEnd(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	p := startDispatcher(t, ns.URL(), "--leader-election=false", "--queue-threshold", "1")
	fleet := startFleet(t, nc, 2, fakeengine.Config{MaxNumSeqs: 8, NumGPUBlocks: 400, DecodePerToken: time.Millisecond, PromptTokensDetails: true},
		engineworker.Config{}) // the default scrape period, 250 ms
	waitFor(t, 30*time.Second, "two live engine workers", func() bool { return p.metric("fairdispatch_live_workers") == 2 })

	const n = 500
	c := newRespCaller(t, nc)
	r := rand.New(rand.NewPCG(24, 1))
	type sent struct {
		call   *respCall
		tokens int
		usage  bool
	}
	var calls []sent
	for i := range n {
		tenant := []string{"alice", "bob"}[i%2]
		msgs := []fakeengine.Message{{Role: "system", Content: "You answer for " + tenant + " in few words."},
			{Role: "user", Content: fmt.Sprintf("question %d of %s", i, tenant)}}
		tokens, usage := 4+r.IntN(20), i%4 == 0
		call := c.start(fmt.Sprint("a1-", i), "default", chatHeader(tenant, msgs), chatRequest(msgs, tokens, true, usage))
		calls = append(calls, sent{call, tokens, usage})
	}
	served := map[string]int{}
	for _, s := range calls {
		if err := s.call.wait(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		end, chunks, broken := s.call.result()
		if broken != "" || end == nil || end.Status != wire.EndOK {
			t.Fatalf("%s: end %+v, broken %q", s.call.id, end, broken)
		}
		text := chunks
		if s.usage { // the usage chunk the caller asked for is last
			if last := string(chunks[len(chunks)-1]); !strings.Contains(last, `"choices":[]`) || !strings.Contains(last, `"usage"`) {
				t.Fatalf("%s: last chunk %s: want the usage chunk", s.call.id, last)
			}
			text = chunks[:len(chunks)-1]
		}
		got, err := content(text)
		if err != nil || got != expectedContent(s.tokens) {
			t.Fatalf("%s: text %q (%v), want %q: the stream is out of order or incomplete", s.call.id, got, err, expectedContent(s.tokens))
		}
		if end.Usage == nil || end.Usage.CompletionTokens != uint64(s.tokens) || int(end.Chunks) != len(chunks) {
			t.Fatalf("%s: end marker %+v after %d chunks", s.call.id, end, len(chunks))
		}
		served[s.call.worker()]++
	}
	t.Logf("%d streams answered in order; per engine worker %v", n, served)

	// The load the dispatcher sees follows the engine's metrics: requests
	// the engine runs for another client show in active_requests, their
	// blocks in kv_used_blocks (vllm:kv_cache_usage_perc x num_gpu_blocks).
	// For each change the test notes the engine's scrapes until the
	// worker's report carries it (the first scrape that starts after the
	// change does), and when /debug/queues shows it (the dispatcher builds
	// that view once a second: its "at").
	fe := fleet[0]
	var mu sync.Mutex
	var last wire.LoadReport
	subscribe(t, nc, "dispatch.load."+fe.id, func(m *nats.Msg) {
		var r wire.LoadReport
		if json.Unmarshal(m.Data, &r) == nil && len(r.Ranks) == 1 {
			mu.Lock()
			last = r
			mu.Unlock()
		}
	})
	var reportLag, viewLag []time.Duration
	var scrapes []uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	stops := []context.CancelFunc{}
	for _, k := range []int{3, 6, 2, 0} {
		for len(stops) < k {
			rctx, stop := context.WithCancel(ctx)
			stops = append(stops, stop)
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				body := chatRequest([]fakeengine.Message{{Role: "user", Content: fmt.Sprintf("foreign %d", i)}}, 1<<20, true, false)
				_, _ = engineworker.Call(rctx, http.DefaultClient, "http://"+fe.addr, "chat.completions", body, -1, func([]byte) error { return nil })
			}(len(stops))
		}
		for len(stops) > k {
			stops[len(stops)-1]()
			stops = stops[:len(stops)-1]
		}
		waitFor(t, 10*time.Second, "the engine runs the foreign requests", func() bool { s := fe.e.Stats(); return s.Running == k && s.Waiting == 0 })
		changed, before := time.Now(), fe.e.Stats().Scrapes
		want := uint64(fe.e.Stats().UsedBlocks)
		waitFor(t, 10*time.Second, fmt.Sprintf("%s's report: %d requests, %d KV blocks", fe.id, k, want), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(last.Ranks) == 1 && last.Ranks[0].ActiveRequests == uint64(k) && last.Ranks[0].KVUsedBlocks == want
		})
		reportLag, scrapes = append(reportLag, time.Since(changed)), append(scrapes, fe.e.Stats().Scrapes-before)
		if n := scrapes[len(scrapes)-1]; n > 3 {
			t.Errorf("the report carrying the change came after %d scrapes of the engine, want it from the first that read it (at most 2, 3 with a late report)", n)
		}
		var at time.Time
		waitFor(t, 10*time.Second, fmt.Sprintf("the dispatcher's view of %s: %d requests, %d KV blocks", fe.id, k, want), func() bool {
			v, ok := p.queues()
			if w := v.worker(fe.id); ok && w != nil && len(w.Ranks) == 1 && w.Ranks[0].ActiveRequests == uint64(k) && w.Ranks[0].KVUsedBlocks == want {
				at = v.At
				return true
			}
			return false
		})
		viewLag = append(viewLag, at.Sub(changed))
	}
	cancel()
	wg.Wait()
	t.Logf("load changes behind the worker's back: reported after %v (engine scrapes meanwhile %v, scrape period %v); in /debug/queues (built every 1 s) after %v",
		reportLag, scrapes, fe.w.Config().ScrapeInterval, viewLag)
}

// chatWorkload is issue 24's acceptance 2 workload: multi-turn chats, each
// opened on one of 20 shared system prompts drawn with Zipf popularity.
type chatWorkload struct {
	systems []string
	weights []float64
	convs   [][]fakeengine.Message
}

// The workload's shape (TestEngineWorkerKVRouting).
const (
	kvSystems     = 20
	kvZipf        = 0.8 // popularity of system prompt k: 1/k^0.8
	kvSystemWords = 400 // to 600: 25 to 38 blocks of 16 tokens
	kvNewConv     = 3   // one request in 3 opens a conversation
	kvMaxTurns    = 4
	kvReplyTokens = 16
	kvUserWords   = 30 // to 60
)

func newChatWorkload(seed uint64) *chatWorkload {
	r := rand.New(rand.NewPCG(seed, 7))
	w := &chatWorkload{}
	for k := range kvSystems {
		words := make([]string, kvSystemWords+r.IntN(kvSystemWords/2))
		for i := range words {
			words[i] = fmt.Sprintf("s%dw%d", k, r.IntN(5000))
		}
		w.systems = append(w.systems, strings.Join(words, " "))
		w.weights = append(w.weights, 1/math.Pow(float64(k+1), kvZipf))
	}
	return w
}

// next returns the messages of the next request: a new conversation or the
// next turn of an open one (its earlier turns and the engine's replies,
// kvReplyTokens tokens, as the client sends them back).
func (w *chatWorkload) next(r *rand.Rand) []fakeengine.Message {
	if len(w.convs) == 0 || r.IntN(kvNewConv) == 0 {
		var total float64
		for _, x := range w.weights {
			total += x
		}
		x, k := r.Float64()*total, 0
		for ; k < len(w.weights)-1; k++ {
			if x -= w.weights[k]; x < 0 {
				break
			}
		}
		w.convs = append(w.convs, []fakeengine.Message{{Role: "system", Content: w.systems[k]}})
	}
	i := r.IntN(len(w.convs))
	words := make([]string, kvUserWords+r.IntN(kvUserWords))
	for j := range words {
		words[j] = fmt.Sprintf("u%d", r.IntN(100000))
	}
	c := append(w.convs[i], fakeengine.Message{Role: "user", Content: strings.Join(words, " ")})
	w.convs[i] = append(c, fakeengine.Message{Role: "assistant", Content: strings.TrimSpace(expectedContent(kvReplyTokens))})
	if (len(w.convs[i])-1)/2 >= kvMaxTurns {
		w.convs = append(w.convs[:i], w.convs[i+1:]...) // the conversation is over
	}
	return c
}

// kvRun is what one run of the acceptance 2 workload measured.
type kvRun struct {
	hitRate  float64  // cached prompt tokens / prompt tokens, from the engines
	requests []uint64 // per engine
	overlap  float64  // the dispatcher's overlap hit rate (with the index)
}

// runChatFleet runs the workload on two fake engines whose prefix caches
// hold about 60% of the system prompts each, open loop at kvRate requests
// a second, and returns the engines' hit rate and their requests.
func runChatFleet(t *testing.T, kvIndex bool) kvRun {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	args := []string{"--leader-election=false", "--overlap-score-credit", "2"}
	if kvIndex {
		args = append(args, "--kv-index")
	}
	p := startDispatcher(t, ns.URL(), args...)
	fleet := startFleet(t, nc, 2, fakeengine.Config{BlockSize: 16, NumGPUBlocks: kvCacheBlocks, MaxNumSeqs: 16,
		PrefillTokensPerSec: 20000, DecodePerToken: 2 * time.Millisecond, PromptTokensDetails: true}, engineworker.Config{})
	waitFor(t, 30*time.Second, "two live engine workers", func() bool { return p.metric("fairdispatch_live_workers") == 2 })
	if kvIndex {
		waitFor(t, 30*time.Second, "the workers' first KV events applied", func() bool {
			return p.metric("fairdispatch_kv_events_total", `result="applied"`) >= 2
		})
	}
	c := newRespCaller(t, nc)
	w, r := newChatWorkload(24), rand.New(rand.NewPCG(24, 1))
	var calls []*respCall
	tick := time.NewTicker(time.Second / kvRate)
	defer tick.Stop()
	for i := range kvRequests {
		<-tick.C
		msgs := w.next(r)
		calls = append(calls, c.start(fmt.Sprint("kv-", i), "default", chatHeader("", msgs), chatRequest(msgs, kvReplyTokens, true, false)))
	}
	for _, call := range calls {
		if err := call.wait(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		if end, _, broken := call.result(); end == nil || end.Status != wire.EndOK || broken != "" {
			t.Fatalf("%s: end %+v, broken %q", call.id, end, broken)
		}
	}
	var out kvRun
	var cached, prompt uint64
	for _, fe := range fleet {
		s := fe.e.Stats()
		cached, prompt = cached+s.CachedTokens, prompt+s.PromptTokens
		out.requests = append(out.requests, s.Requests)
	}
	out.hitRate = float64(cached) / float64(prompt)
	if kvIndex {
		out.overlap = p.metric("fairdispatch_kv_overlap_blocks_total") / p.metric("fairdispatch_kv_prompt_blocks_total")
	}
	return out
}

// The acceptance 2 run's size and the engines' caches.
const (
	kvRequests    = 400
	kvRate        = 80
	kvCacheBlocks = 120
)

// TestEngineWorkerKVRouting is issue 24's acceptance 2: KV routing from the
// engines' own ZMQ events (hashes recomputed by the engine workers from the
// token ids) raises the prefix cache hit rate the fake engines measure to
// at least 1.5 times that of the same run with --kv-index off, and no
// engine takes more than 1.2 times its share.
//
// The workload makes the caches matter: 20 system prompts of 25 to 38
// blocks (about 620 blocks in all) with Zipf(0.8) popularity, each opening
// conversations of up to 4 turns (30 to 60 words from the user, 16 tokens
// of reply), one request in 3 a new conversation, 400 requests at 80 a
// second; two engines whose LRU prefix caches hold 120 blocks each, about
// 4 of the system prompts. Routed by load, each engine sees every family
// and its cache holds the few hottest; routed by overlap, each family and
// each conversation stays on the engine that holds it, so the two caches
// hold different families: twice as many in all. What routing can gain is
// bounded by kvBounds, the same requests sent straight to two engines at
// random and by a fixed partition of the families: measured 0.281 and
// 0.473, a ratio of 1.68; with the dispatcher 0.280 without the index (as
// random) and 0.443 with it, 1.59, shares 188 and 212 (under the race
// detector 0.264 and 0.422, 1.60). With larger caches the bound itself
// falls (caches of 200 blocks: 1.59; of 300: 1.44): a cache that holds the
// hot prompts already serves most of a Zipf workload by itself.
func TestEngineWorkerKVRouting(t *testing.T) {
	random, partition, shares := kvBounds(t)
	t.Logf("bounds: random routing %.3f, a fixed partition of the families %.3f (shares %.2f): ratio %.2f", random, partition, shares, partition/random)
	with := runChatFleet(t, true)
	without := runChatFleet(t, false)
	t.Logf("hit rate with the index %.3f (requests %v, dispatch overlap %.3f), without %.3f (requests %v), ratio %.2f",
		with.hitRate, with.requests, with.overlap, without.hitRate, without.requests, with.hitRate/without.hitRate)
	if with.hitRate < 1.5*without.hitRate {
		t.Errorf("hit rate %.3f with the index, %.3f without: want at least 1.5 times", with.hitRate, without.hitRate)
	}
	total := with.requests[0] + with.requests[1]
	for i, n := range with.requests {
		if share := float64(n) / (float64(total) / 2); share > 1.2 {
			t.Errorf("engine %d took %d of %d requests, %.2f times its share: want at most 1.2", i+1, n, total, share)
		}
	}
}

// kvBounds runs the acceptance 2 workload (the same seed) straight into two
// fake engines, without a dispatcher, routed two ways: at random (what
// routing by load alone amounts to on idle engines) and by a fixed
// partition of the system prompts, each family on one engine (the ideal
// that routing by overlap approaches; the families split greedily by
// popularity, so the engines' shares are about even). Their hit rates
// bound what routing can gain on this workload with these caches.
func kvBounds(t *testing.T) (random, partition float64, shares []float64) {
	t.Helper()
	run := func(route func(family int, r *rand.Rand) int) (float64, []float64) {
		var urls []string
		var engines []*fakeengine.Engine
		for range 2 {
			e, err := fakeengine.New(context.Background(), fakeengine.Config{BlockSize: 16, NumGPUBlocks: kvCacheBlocks, MaxNumSeqs: 1,
				PrefillTokensPerSec: 1e12, DecodePerToken: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(e.Handler())
			defer srv.Close()
			urls, engines = append(urls, srv.URL), append(engines, e)
		}
		w, r, rr := newChatWorkload(24), rand.New(rand.NewPCG(24, 1)), rand.New(rand.NewPCG(5, 5))
		for range kvRequests {
			msgs := w.next(r)
			i := route(w.familyOf(msgs[0].Content), rr)
			if _, err := engineworker.Call(context.Background(), http.DefaultClient, urls[i], "chat.completions",
				chatRequest(msgs, kvReplyTokens, false, false), -1, func([]byte) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		var cached, prompt, n0 float64
		for i, e := range engines {
			s := e.Stats()
			cached, prompt = cached+float64(s.CachedTokens), prompt+float64(s.PromptTokens)
			if i == 0 {
				n0 = float64(s.Requests)
			}
		}
		return cached / prompt, []float64{n0 / kvRequests, 1 - n0/kvRequests}
	}
	random, _ = run(func(_ int, r *rand.Rand) int { return r.IntN(2) })
	w := newChatWorkload(24)
	side, load := make([]int, len(w.weights)), [2]float64{}
	for k, x := range w.weights { // the most popular first, each to the lighter engine
		i := 0
		if load[1] < load[0] {
			i = 1
		}
		side[k], load[i] = i, load[i]+x
	}
	partition, shares = run(func(k int, _ *rand.Rand) int { return side[k] })
	return random, partition, shares
}

// familyOf returns the index of a system prompt.
func (w *chatWorkload) familyOf(system string) int {
	for k, s := range w.systems {
		if s == system {
			return k
		}
	}
	return -1
}
