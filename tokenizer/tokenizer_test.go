package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// vectors are the reference token ids of testdata/vectors.json, written by
// testdata/encode.js with the Hugging Face tokenizers library from the chats
// rendered by testdata/render.py with jinja2 as transformers renders them
// (see testdata/README.md).
type vectors struct {
	Chats []struct {
		Name     string    `json:"name"`
		Messages []Message `json:"messages"`
		Text     string    `json:"text"`
		IDs      []uint32  `json:"ids"`
	} `json:"chats"`
	Prompts []struct {
		Name     string              `json:"name"`
		Prompt   string              `json:"prompt"`
		IDs      []uint32            `json:"ids"`
		Variants map[string][]uint32 `json:"variants"`
	} `json:"prompts"`
}

func load(t testing.TB) (*Tokenizer, vectors) {
	tok, err := Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return tok, v
}

func TestMatchesTheReference(t *testing.T) {
	tok, v := load(t)
	for _, c := range v.Chats {
		t.Run(c.Name, func(t *testing.T) {
			text, err := tok.Render(c.Messages)
			if err != nil || text != c.Text {
				t.Fatalf("rendered %q, %v\nwant %q", text, err, c.Text)
			}
			ids, err := tok.Chat(c.Messages)
			if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.IDs) {
				t.Fatalf("ids %v, %v\nwant %v", ids, err, c.IDs)
			}
		})
	}
	for _, p := range v.Prompts {
		t.Run(p.Name, func(t *testing.T) {
			if ids := tok.Encode(p.Prompt, true); fmt.Sprint(ids) != fmt.Sprint(p.IDs) {
				t.Fatalf("ids %v\nwant %v", ids, p.IDs)
			}
		})
	}
}

// variant returns testdata/tokenizer.json with another pre-tokenizer or
// layout, as testdata/variants.js builds it.
func variant(t *testing.T, name string) *Tokenizer {
	b, err := os.ReadFile("testdata/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	switch name {
	case "gpt2":
		doc["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	case "llama3":
		split := doc["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
		split["pattern"] = map[string]any{"Regex": patternLlama3}
	case "llama3file": // Llama 3's layout: its split, ignore_merges, a Sequence post-processor
		split := doc["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
		split["pattern"] = map[string]any{"Regex": patternLlama3}
		model := doc["model"].(map[string]any)
		model["ignore_merges"] = true
		vocab := model["vocab"].(map[string]any)
		next := 0.0
		for _, id := range vocab {
			next = max(next, id.(float64)+1)
		}
		for _, a := range doc["added_tokens"].([]any) {
			next = max(next, a.(map[string]any)["id"].(float64)+1)
		}
		for _, w := range []string{"\u0120backlog", "\u0120tenants"} { // in the vocabulary whole, not made by the merges
			vocab[w] = next
			next++
		}
		doc["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			doc["post_processor"]}}
	default:
		t.Fatalf("unknown variant %s", name)
	}
	b, _ = json.Marshal(doc)
	tok, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVariantsMatchTheReference(t *testing.T) {
	_, v := load(t)
	for _, name := range []string{"gpt2", "llama3", "llama3file"} {
		tok := variant(t, name)
		for _, p := range v.Prompts {
			want, ok := p.Variants[name]
			if !ok {
				t.Fatalf("vectors.json has no %s ids for %q", name, p.Name)
			}
			if ids := tok.Encode(p.Prompt, true); fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Errorf("%s, %s: ids %v\nwant %v", name, p.Name, ids, want)
			}
		}
	}
}

func TestSplitPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          []string
	}{
		{patternQwen2, "Hello world's 12345  x\n\n  y   ", []string{"Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " ", " x", "\n\n", " ", " y", "   "}},
		{patternLlama3, "12345 ab", []string{"123", "45", " ab"}},
		{patternGPT2, "Hello world's 12345  x!!\n", []string{"Hello", " world", "'s", " 12345", " ", " x", "!!", "\n"}},
		{patternQwen2, "I'M ok?!\r\nnext", []string{"I", "'M", " ok", "?!\r\n", "next"}},
	} {
		sp, ok := splitterFor(tc.pattern)
		if !ok {
			t.Fatalf("pattern %q unknown", tc.pattern)
		}
		if got := sp.split(tc.text, nil); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("split %q:\n got %q\nwant %q", tc.text, got, tc.want)
		}
	}
}

func TestUnsupported(t *testing.T) {
	for _, doc := range []string{
		`{"model":{"type":"WordPiece","vocab":{}}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[],"byte_fallback":true},"pre_tokenizer":{"type":"ByteLevel"}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Metaspace"}}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]}}`,
	} {
		if _, err := Parse([]byte(doc)); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Parse(%s): %v, want ErrUnsupported", doc, err)
		}
	}
}

func BenchmarkChat(b *testing.B) {
	tok, v := load(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tok.Chat(v.Chats[0].Messages); err != nil {
			b.Fatal(err)
		}
	}
}

// tokenizerDir makes a model directory with testdata's tokenizer.json and
// the given other files.
func tokenizerDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	files["tokenizer.json"] = string(b)
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestChatTemplateFile: chat_template.jinja, where transformers saves a
// template since 2025, is the template, and wins over the config's; the
// config's special tokens still apply. A directory with neither says so.
func TestChatTemplateFile(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"the file alone", map[string]string{"chat_template.jinja": "[{{ messages[0].content }}]"}, "[hi]"},
		{"the file over the config's", map[string]string{
			"chat_template.jinja":   "{{ bos_token }}<{{ messages[0].content }}>",
			"tokenizer_config.json": `{"chat_template": "config's {{ messages[0].content }}", "bos_token": "<|endoftext|>"}`,
		}, "<|endoftext|><hi>"},
		{"the config's alone", map[string]string{"tokenizer_config.json": `{"chat_template": "config's {{ messages[0].content }}"}`}, "config's hi"},
		{"the other special tokens, as transformers passes them", map[string]string{
			"chat_template.jinja":   "{{ pad_token }}|{{ unk_token }}|{{ sep_token is defined }}",
			"tokenizer_config.json": `{"pad_token": "<pad>", "unk_token": {"content": "<unk>"}, "sep_token": null}`,
		}, "<pad>|<unk>|False"},
	} {
		tok, err := Load(tokenizerDir(t, c.files))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, err := tok.Render(msgs); err != nil || got != c.want || !tok.HasChatTemplate() {
			t.Errorf("%s: Render = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	tok, err := Load(tokenizerDir(t, map[string]string{"tokenizer_config.json": `{"bos_token": "<s>"}`}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Render(msgs); !errors.Is(err, ErrNoChatTemplate) || tok.HasChatTemplate() {
		t.Errorf("without a template: %v, HasChatTemplate %v; want ErrNoChatTemplate and false", err, tok.HasChatTemplate())
	}
}

// TestRenderDoesNotPanic: a template that makes the Jinja engine panic (gonja
// divides by zero on Python's '%' formatting) is an error of Render, which
// the gateway answers by estimating, not a crash of the request.
func TestRenderDoesNotPanic(t *testing.T) {
	tok, err := Load(tokenizerDir(t, map[string]string{"chat_template.jinja": "{{ '%s-%d' % ('a', 3) }}{{ messages[0].content }}"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Render([]Message{{Role: "user", Content: "hi"}}); err == nil {
		t.Log("gonja rendered '%' formatting: the panic this test guards against is gone")
	}
}
