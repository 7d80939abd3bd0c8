package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported says that a tokenizer.json uses a part this package does not
// implement; the gateway then estimates instead (docs/config.md, Token counts).
var ErrUnsupported = errors.New("tokenizer: unsupported")

// Tokenizer is a loaded tokenizer.json: safe for concurrent use.
type Tokenizer struct {
	vocab        map[string]uint32
	merges       map[[2]uint32]merge // a pair of ids -> its rank and the id it makes
	byteID       [256]uint32         // each byte's ByteLevel character's id
	ignoreMerges bool                // a pre-token in the vocabulary whole is one id (Llama 3)
	added        []addedToken        // longest content first
	addedFirst   *[256]*trieNode     // the trie of added contents, by first byte (nil: none), for nextAdded
	nfc          bool
	split        *splitter // nil: ByteLevel alone, no split
	prefixSp     bool      // ByteLevel add_prefix_space
	prepend      []uint32  // TemplateProcessing: special ids before the sequence
	append_      []uint32  // and after it
	chat         *chatTemplate
	cache        sync.Map     // pre-token -> ids
	cached       atomic.Int64 // entries stored in cache
}

type addedToken struct {
	content string
	id      uint32
}

// file is the part of tokenizer.json this package reads.
type file struct {
	AddedTokens []struct {
		ID         uint32 `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer    *component      `json:"normalizer"`
	PreTokenizer  *component      `json:"pre_tokenizer"`
	PostProcessor *component      `json:"post_processor"`
	Model         json.RawMessage `json:"model"`
}

// component is a normalizer, pre-tokenizer or post-processor.
type component struct {
	Type          string      `json:"type"`
	Pretokenizers []component `json:"pretokenizers"`
	Processors    []component `json:"processors"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
	Single         []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

type bpeModel struct {
	Type                    string            `json:"type"`
	Vocab                   map[string]uint32 `json:"vocab"`
	Merges                  json.RawMessage   `json:"merges"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
}

func unsupported(f string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(f, a...))
}

// Load reads dir/tokenizer.json and, when present, the chat template: that
// of dir/chat_template.jinja, else that of dir/tokenizer_config.json, as
// transformers loads them (it saves the template to chat_template.jinja
// since 2025, and the file wins over the config's). The config's bos_token
// and eos_token are read in either case.
func Load(dir string) (*Tokenizer, error) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, err
	}
	optional := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		return b, nil
	}
	cfg, err := optional("tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	jinja, err := optional("chat_template.jinja")
	if err != nil {
		return nil, err
	}
	if t.chat, err = parseChatTemplate(cfg, jinja); err != nil {
		return nil, err
	}
	return t, nil
}

// HasChatTemplate reports whether the tokenizer has a chat template; without
// one, Chat and Render return ErrNoChatTemplate.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// Parse reads a tokenizer.json: a byte-level BPE model (GPT-2's, Qwen2's,
// Llama 3's layout), with its added tokens, an NFC normalizer or none, a
// ByteLevel pre-tokenizer (after a Split of one of the known patterns, or
// with its own regex), and a TemplateProcessing or ByteLevel post-processor
// or none. Anything else is an error wrapping ErrUnsupported.
func Parse(data []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	var m bpeModel
	if err := json.Unmarshal(f.Model, &m); err != nil {
		return nil, fmt.Errorf("tokenizer: model: %w", err)
	}
	switch {
	case m.Type != "BPE":
		return nil, unsupported("model type %q (only BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0, m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "", m.ByteFallback:
		return nil, unsupported("BPE with dropout, subword affixes or byte fallback")
	}
	t := &Tokenizer{vocab: m.Vocab, merges: map[[2]uint32]merge{}, ignoreMerges: m.IgnoreMerges}
	var pairs [][2]string
	var asLists [][]string
	if err := json.Unmarshal(m.Merges, &asLists); err == nil {
		for _, p := range asLists {
			if len(p) != 2 {
				return nil, fmt.Errorf("tokenizer: a merge of %d parts", len(p))
			}
			pairs = append(pairs, [2]string{p[0], p[1]})
		}
	} else {
		var asStrings []string
		if err := json.Unmarshal(m.Merges, &asStrings); err != nil {
			return nil, fmt.Errorf("tokenizer: merges: %w", err)
		}
		for _, s := range asStrings {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("tokenizer: merge %q", s)
			}
			pairs = append(pairs, [2]string{a, b})
		}
	}
	// As the Hugging Face library's BPE builder, every part and result of a
	// merge must be in the vocabulary.
	for i, p := range pairs {
		a, okA := t.vocab[p[0]]
		b, okB := t.vocab[p[1]]
		id, ok := t.vocab[p[0]+p[1]]
		if !okA || !okB || !ok {
			return nil, fmt.Errorf("tokenizer: merge %d (%q %q): a part or its result is not in the vocabulary", i, p[0], p[1])
		}
		if _, dup := t.merges[[2]uint32{a, b}]; !dup {
			t.merges[[2]uint32{a, b}] = merge{rank: int32(i), id: id}
		}
	}
	for _, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, unsupported("added token %q with single_word, lstrip or rstrip", a.Content)
		}
		t.added = append(t.added, addedToken{content: a.Content, id: a.ID})
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	t.addedFirst = newTrie(t.added)
	if n := f.Normalizer; n != nil {
		if n.Type != "NFC" {
			return nil, unsupported("normalizer %q (only NFC or none)", n.Type)
		}
		t.nfc = true
	}
	if err := t.preTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.postProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	// Every byte must be a token: byte-level BPE can encode any text.
	for b := range 256 {
		id, ok := t.vocab[string(byteChar[b])]
		if !ok {
			return nil, unsupported("the vocabulary lacks byte 0x%02x: not a byte-level BPE", b)
		}
		t.byteID[b] = id
	}
	return t, nil
}

func (t *Tokenizer) preTokenizer(p *component) error {
	if p == nil {
		return unsupported("no pre-tokenizer (want ByteLevel)")
	}
	byteLevel := func(c component, afterSplit bool) error {
		t.prefixSp = c.AddPrefixSpace
		useRegex := c.UseRegex == nil || *c.UseRegex
		switch {
		case useRegex && afterSplit:
			return unsupported("ByteLevel with its own regex after a Split")
		case useRegex:
			sp, _ := splitterFor(patternGPT2)
			t.split = &sp
		}
		return nil
	}
	switch p.Type {
	case "ByteLevel":
		return byteLevel(*p, false)
	case "Sequence":
		if len(p.Pretokenizers) != 2 || p.Pretokenizers[0].Type != "Split" || p.Pretokenizers[1].Type != "ByteLevel" {
			return unsupported("pre-tokenizer sequence (want Split then ByteLevel)")
		}
		s := p.Pretokenizers[0]
		if s.Pattern == nil || s.Pattern.Regex == nil || s.Behavior != "Isolated" || s.Invert {
			return unsupported("Split other than an isolated regex")
		}
		sp, ok := splitterFor(*s.Pattern.Regex)
		if !ok {
			return unsupported("Split pattern %q (known: GPT-2's, Qwen2's, Llama 3's)", *s.Pattern.Regex)
		}
		t.split = &sp
		return byteLevel(p.Pretokenizers[1], true)
	}
	return unsupported("pre-tokenizer %q", p.Type)
}

func (t *Tokenizer) postProcessor(p *component) error {
	if p == nil || p.Type == "ByteLevel" {
		return nil
	}
	if p.Type == "Sequence" { // Llama 3's: ByteLevel (offsets only), then TemplateProcessing
		templates := 0
		for i := range p.Processors {
			q := &p.Processors[i]
			switch q.Type {
			case "ByteLevel":
			case "TemplateProcessing":
				if templates++; templates > 1 {
					return unsupported("post-processor sequence with two TemplateProcessing")
				}
				if err := t.postProcessor(q); err != nil {
					return err
				}
			default:
				return unsupported("post-processor %q in a sequence (want ByteLevel and TemplateProcessing)", q.Type)
			}
		}
		return nil
	}
	if p.Type != "TemplateProcessing" {
		return unsupported("post-processor %q", p.Type)
	}
	seen := false
	for _, piece := range p.Single {
		switch {
		case piece.Sequence != nil:
			seen = true
		case piece.SpecialToken != nil:
			st, ok := p.SpecialTokens[piece.SpecialToken.ID]
			if !ok {
				return fmt.Errorf("tokenizer: post-processor: special token %q undefined", piece.SpecialToken.ID)
			}
			if seen {
				t.append_ = append(t.append_, st.IDs...)
			} else {
				t.prepend = append(t.prepend, st.IDs...)
			}
		}
	}
	return nil
}

// Encode returns the token ids of text; addSpecial adds the post-processor's
// special tokens (a completion prompt: true; a rendered chat prompt: false,
// as vLLM and SGLang encode them). Added tokens (<|im_start|>, ...) in the
// text are always recognised, as the Hugging Face library does.
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	var ids []uint32
	if addSpecial {
		ids = append(ids, t.prepend...)
	}
	for len(text) > 0 {
		at, tok := t.nextAdded(text)
		ids = t.encodeText(text[:at], ids)
		if tok == nil {
			break
		}
		ids = append(ids, tok.id)
		text = text[at+len(tok.content):]
	}
	if addSpecial {
		ids = append(ids, t.append_...)
	}
	return ids
}

// nextAdded finds the leftmost added token in s (the longest at that
// position): its offset and the token, or len(s) and nil. It walks the trie
// of added contents from each offset in turn, so finding every added token
// of a text costs its length times the longest content at most, whatever
// the number of added tokens or of their occurrences (the library uses
// Aho-Corasick to the same end).
func (t *Tokenizer) nextAdded(s string) (int, *addedToken) {
	first := t.addedFirst
	if first == nil {
		return len(s), nil
	}
	for at := 0; at < len(s); at++ {
		n := first[s[at]] // an array, not a map: most bytes start no added token
		if n == nil {
			continue
		}
		best := n.tok
		for i := at + 1; i < len(s); i++ {
			if n = n.next[s[i]]; n == nil {
				break
			}
			if n.tok != nil {
				best = n.tok
			}
		}
		if best != nil {
			return at, best
		}
	}
	return len(s), nil
}

// trieNode is a node of the byte trie of added tokens' contents: tok is the
// token whose content ends here, if any.
type trieNode struct {
	next map[byte]*trieNode
	tok  *addedToken
}

// newTrie builds the trie of added and returns its root's children by byte
// (nil when no token has content); of two tokens with one content, the first
// keeps it.
func newTrie(added []addedToken) *[256]*trieNode {
	var root *trieNode
	for i := range added {
		a := &added[i]
		if a.content == "" {
			continue
		}
		if root == nil {
			root = &trieNode{next: map[byte]*trieNode{}}
		}
		n := root
		for j := 0; j < len(a.content); j++ {
			c := n.next[a.content[j]]
			if c == nil {
				c = &trieNode{next: map[byte]*trieNode{}}
				n.next[a.content[j]] = c
			}
			n = c
		}
		if n.tok == nil {
			n.tok = a
		}
	}
	if root == nil {
		return nil
	}
	var first [256]*trieNode
	for c, n := range root.next {
		first[c] = n
	}
	return &first
}

// encodeText encodes text that holds no added token.
func (t *Tokenizer) encodeText(text string, ids []uint32) []uint32 {
	if text == "" {
		return ids
	}
	if t.nfc {
		text = norm.NFC.String(text)
	}
	if t.prefixSp && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	var pieces []string
	if t.split != nil {
		pieces = t.split.split(text, nil)
	} else {
		pieces = []string{text}
	}
	for _, p := range pieces {
		ids = t.bpe(p, ids)
	}
	return ids
}
