package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/tokenizer"
)

// TestGatewayTokenizerKVRouting is issue 24's "the block hashes the gateway
// sends must match those the engine worker derives from the engine's events
// for the same prompt", across the whole path: the gateway with a model
// tokenizer (tokenizer/testdata: a Qwen2-style byte-level BPE and its ChatML
// template) hashes a chat's token ids; fake engines that tokenize chats with
// the same files, as a vLLM server of that model does, publish the blocks of
// a first chat, from whose token ids the engine workers derive their hashes
// for the dispatcher's index; a second chat with the same system prompt is
// then scored by the index with exactly the full blocks the two chats share
// (so the two sides' hashes agree block for block), goes to the engine that
// holds them, and finds them there in its prefix cache.
func TestGatewayTokenizerKVRouting(t *testing.T) {
	dir, err := filepath.Abs("../../tokenizer/testdata")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(msgs []fakeengine.Message) []uint32 {
		var m []tokenizer.Message
		for _, x := range msgs {
			m = append(m, tokenizer.Message{Role: x.Role, Content: x.Content})
		}
		out, err := tok.Chat(m)
		if err != nil {
			t.Error(err)
		}
		return out
	}
	engineIDs := func(msgs []fakeengine.Message, gen bool) ([]uint32, error) {
		if !gen {
			return nil, errors.New("the test's chats all add the generation prompt")
		}
		return ids(msgs), nil
	}

	ns := startNATS(t)
	nc := connect(t, ns.URL())
	p := startDispatcher(t, ns.URL(), "--kv-index")
	fleet := startFleet(t, nc, 2, fakeengine.Config{BlockSize: 16, PromptTokensDetails: true, ChatTokenizer: engineIDs}, engineworker.Config{})
	waitFor(t, 30*time.Second, "two live engine workers", func() bool { return p.metric("fairdispatch_live_workers") == 2 })
	url := startGatewayOn(t, ns.URL(), gwConfig(gwOptions{
		modelExtra: fmt.Sprintf("    engine_model: fake-model\n    tokenizer: %s\n    block_size: 16\n", dir),
		tenants:    []gwTenant{{name: "acme", classes: "[default]"}}}), prometheus.NewRegistry(), nil)

	var rules []string
	for k := range 12 {
		rules = append(rules, fmt.Sprintf("Rule %d: answer the customer of shop %d briefly, and politely.", k+1, 40+k))
	}
	system := fakeengine.Message{Role: "system", Content: "You are the support assistant of the shop. " + strings.Join(rules, " ")}
	first := []fakeengine.Message{system, {Role: "user", Content: "Where is my order 1234?"}}
	second := []fakeengine.Message{system, {Role: "user", Content: "Can I return the blue shoes?"}}
	a, b := ids(first), ids(second)
	common := 0
	for common < min(len(a), len(b)) && a[common] == b[common] {
		common++
	}
	shared := min(common, len(a)) / 16 // the full blocks the engine holds after the first chat that the second starts with
	if shared < 5 {
		t.Fatalf("the chats share %d tokens: want a system prompt of several blocks", common)
	}

	chat := func(msgs []fakeengine.Message) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": gwModel, "messages": msgs, "max_tokens": 2})
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		if n := len(ids(msgs)); out.Usage.PromptTokens != n {
			t.Fatalf("the engine counted %d prompt tokens, the gateway's tokenizer %d: they tokenize differently", out.Usage.PromptTokens, n)
		}
	}
	chat(first)
	waitFor(t, 10*time.Second, "the first chat's blocks in the index", func() bool {
		return p.metric("fairdispatch_kv_index_blocks") >= float64(len(a)/16) && p.metric("fairdispatch_kv_stale_ranks") == 0
	})
	holder := fleet[0]
	if fleet[1].e.Stats().Requests == 1 {
		holder = fleet[1]
	}
	overlap, prompt := p.metric("fairdispatch_kv_overlap_blocks_total"), p.metric("fairdispatch_kv_prompt_blocks_total")
	chat(second)
	dOverlap, dPrompt := p.metric("fairdispatch_kv_overlap_blocks_total")-overlap, p.metric("fairdispatch_kv_prompt_blocks_total")-prompt
	s := holder.e.Stats()
	t.Logf("chats of %d and %d tokens sharing %d (%d blocks); the second: %v blocks hashed by the gateway, %v of them held by the chosen engine per the index; the engine that served the first found %d tokens cached of %d",
		len(a), len(b), common, shared, dPrompt, dOverlap, s.CachedTokens, s.PromptTokens)
	if dPrompt != float64(len(b)/16) || dOverlap != float64(shared) {
		t.Errorf("the index scored %v blocks of the second chat and found %v held: want its %d full blocks and the %d shared ones (the gateway's and the engine worker's hashes disagree)",
			dPrompt, dOverlap, len(b)/16, shared)
	}
	if s.Requests != 2 || s.CachedTokens != uint64(16*shared) {
		t.Errorf("the engine that served the first chat served %d requests with %d tokens cached: want the second with its %d shared blocks",
			s.Requests, s.CachedTokens, shared)
	}
}
