package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// ErrNoChatTemplate says that the tokenizer has no chat template.
var ErrNoChatTemplate = errors.New("tokenizer: no chat template (chat_template.jinja, or tokenizer_config.json's chat_template)")

// Message is one chat message as the template sees it.
type Message struct {
	Role    string
	Content string
}

// chatTemplate is a model's chat template, rendered as Hugging Face
// transformers' apply_chat_template does (jinja2 with trim_blocks and
// lstrip_blocks; messages, add_generation_prompt, bos_token, eos_token, and
// the function raise_exception), which vLLM and SGLang use for chat prompts.
type chatTemplate struct {
	tpl      *exec.Template
	bos, eos string
	// special are the config's other special tokens (unk_token, pad_token,
	// ...), which transformers passes to the template too; absent ones stay
	// undefined there.
	special map[string]string
}

// specialTokens are the special tokens of tokenizer_config.json that
// transformers' special_tokens_map holds beside bos_token and eos_token.
var specialTokens = []string{"unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}

// tokenText reads a special token of tokenizer_config.json: a string or an
// object with "content" (AddedToken's form).
func tokenText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Content
}

// parseChatTemplate reads the chat template: jinja (chat_template.jinja's
// text) when not nil, else data's (tokenizer_config.json's) chat_template;
// nil when there is none.
func parseChatTemplate(data, jinja []byte) (*chatTemplate, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	var all map[string]json.RawMessage
	if data != nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
		_ = json.Unmarshal(data, &all) // it parsed as an object above
	}
	special := map[string]string{}
	for _, name := range specialTokens {
		if raw, ok := all[name]; ok && string(raw) != "null" {
			special[name] = tokenText(raw)
		}
	}
	var src string
	switch {
	case jinja != nil:
		src = string(jinja)
	case len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null":
		return nil, nil
	case json.Unmarshal(cfg.ChatTemplate, &src) != nil:
		// A list of named templates: the one named "default".
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
			return nil, fmt.Errorf("tokenizer: chat_template: %w", err)
		}
		for _, n := range named {
			if n.Name == "default" {
				src = n.Template
			}
		}
		if src == "" {
			return nil, errors.New("tokenizer: chat_template: no template named default")
		}
	}
	c := config.New()
	c.TrimBlocks, c.LeftStripBlocks = true, true
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		return nil, err
	}
	sl, err := loaders.NewShiftedLoader("chat_template", strings.NewReader(src), loader)
	if err != nil {
		return nil, err
	}
	tpl, err := exec.NewTemplate("chat_template", c, sl, environment)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat_template: %w", err)
	}
	return &chatTemplate{tpl: tpl, bos: tokenText(cfg.BOS), eos: tokenText(cfg.EOS), special: special}, nil
}

// errRaised is the error of a template's raise_exception.
type errRaised struct{ msg string }

func (e errRaised) Error() string { return "tokenizer: the chat template refused the chat: " + e.msg }

// Render returns the chat prompt of messages with the generation prompt
// (add_generation_prompt=True). A template that makes the Jinja engine panic
// (gonja has such corners, '%' formatting among them) is an error, not a
// crash.
func (t *Tokenizer) Render(messages []Message) (text string, err error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	defer func() {
		if r := recover(); r != nil {
			text, err = "", fmt.Errorf("tokenizer: chat template: the template engine failed: %v", r)
		}
	}()
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	var raised error
	vars := map[string]any{
		"messages": msgs, "add_generation_prompt": true,
		"bos_token": t.chat.bos, "eos_token": t.chat.eos,
		"raise_exception": func(msg string) (string, error) {
			raised = errRaised{msg}
			return "", raised
		},
		"strftime_now": func(format string) string { return strftime(time.Now(), format) },
	}
	for name, text := range t.chat.special {
		vars[name] = text
	}
	ctx := exec.NewContext(vars)
	var b bytes.Buffer
	if err := t.chat.tpl.Execute(&b, ctx); err != nil {
		if raised != nil {
			return "", raised
		}
		return "", fmt.Errorf("tokenizer: chat template: %w", err)
	}
	return b.String(), nil
}

// Chat returns the token ids of messages as vLLM and SGLang tokenize a chat
// request: the rendered prompt, encoded without the post-processor's special
// tokens (the template writes its own).
func (t *Tokenizer) Chat(messages []Message) ([]uint32, error) {
	s, err := t.Render(messages)
	if err != nil {
		return nil, err
	}
	return t.Encode(s, false), nil
}

// strftime formats the few directives chat templates use (%d %b %Y %m %B %H %M).
func strftime(t time.Time, f string) string {
	r := strings.NewReplacer("%d", t.Format("02"), "%b", t.Format("Jan"), "%B", t.Format("January"),
		"%Y", t.Format("2006"), "%m", t.Format("01"), "%H", t.Format("15"), "%M", t.Format("04"))
	return r.Replace(f)
}
