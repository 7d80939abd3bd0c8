package gateway

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"fairdispatch/tokenizer"
	"fairdispatch/wire"
)

// The block hashes the gateway sends for a chat agree with those an engine
// worker computes from the engine's token ids (docs/protocol.md, Block
// hashes): the reference ids of tokenizer/testdata/vectors.json (the Hugging
// Face library's, for the prompt transformers renders), hashed by the rule.
// Two chats with one system prompt share their first blocks.
func TestBlockHashesAgreeWithTheEngine(t *testing.T) {
	var v struct {
		Chats []struct {
			Messages []tokenizer.Message `json:"messages"`
			IDs      []uint32            `json:"ids"`
		} `json:"chats"`
	}
	b, err := os.ReadFile("../tokenizer/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, func(o *Options) {
		o.Config.Models[0].Tokenizer = "../tokenizer/testdata"
		o.Config.Models[0].BlockSize = 16
	})
	var sent [][]uint64
	for i, c := range v.Chats[:2] {
		msgs := make([]map[string]string, len(c.Messages))
		for j, m := range c.Messages {
			msgs[j] = map[string]string{"role": m.Role, "content": m.Content}
		}
		body, _ := json.Marshal(map[string]any{"model": "m1", "max_tokens": 1, "messages": msgs})
		if resp, out := g.post("/v1/chat/completions", "sk-a", string(body)); resp.StatusCode != 200 {
			t.Fatalf("chat %d: %d %s", i, resp.StatusCode, out)
		}
		h := g.resp.headers()[i]
		if got, want := h.Get(wire.HeaderISLTokens), strconv.Itoa(len(c.IDs)); got != want {
			t.Errorf("chat %d: Dispatch-ISL-Tokens %s, want %s (the engine's count)", i, got, want)
		}
		want := wire.EncodeHashes(wire.ChainHashes(nil, c.IDs, 16))
		if got := h.Get(wire.HeaderBlockHashes); got != want {
			t.Fatalf("chat %d: Dispatch-Block-Hashes %s\nwant %s (from the engine's ids)", i, got, want)
		}
		hs, err := wire.DecodeHashes(nil, want)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, hs)
	}
	shared := 0
	for shared < min(len(sent[0]), len(sent[1])) && sent[0][shared] == sent[1][shared] {
		shared++
	}
	if shared == 0 || shared == len(sent[0]) {
		t.Fatalf("%d of %d blocks shared, want the system prompt's (some, not all)", shared, len(sent[0]))
	}
	t.Logf("the two chats share %d of %d and %d blocks", shared, len(sent[0]), len(sent[1]))
	// Without a tokenizer: the estimate, and no hashes.
	g2 := startGateway(t, nil)
	if resp, out := g2.post("/v1/chat/completions", "sk-a", chatBody("hello", "")); resp.StatusCode != 200 || g2.resp.headers()[0].Get(wire.HeaderBlockHashes) != "" {
		t.Fatalf("estimate: %d %s, hashes %q", resp.StatusCode, out, g2.resp.headers()[0].Get(wire.HeaderBlockHashes))
	}
}

// TestFieldsThatChangeThePromptAreEstimated: with a tokenizer, a chat that
// carries a field the engine renders or encodes differently by (vLLM's
// chat_template_kwargs, add_generation_prompt, ...) is estimated and sends
// no block hashes, as one with tools is: the gateway's rendering would not
// be the engine's prompt. Without any, the count is exact.
func TestFieldsThatChangeThePromptAreEstimated(t *testing.T) {
	g := startGateway(t, func(o *Options) {
		o.Config.Models[0].Tokenizer = "../tokenizer/testdata"
		o.Config.Models[0].BlockSize = 16
	})
	extras := []string{"", `,"chat_template_kwargs":{"enable_thinking":false}`, `,"add_generation_prompt":false`,
		`,"continue_final_message":true`, `,"add_special_tokens":true`, `,"chat_template":"{{ messages }}"`,
		`,"documents":[{"text":"d"}]`, `,"tools":[{"type":"function","function":{"name":"f"}}]`}
	for i, extra := range extras {
		if resp, out := g.post("/v1/chat/completions", "sk-a", chatBody("hello there", extra)); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", extra, resp.StatusCode, out)
		}
		hashes := g.resp.headers()[i].Get(wire.HeaderBlockHashes)
		if exact := hashes != ""; exact != (extra == "") {
			t.Errorf("with %q: block hashes %q; want them only without such a field", extra, hashes)
		}
	}
}
