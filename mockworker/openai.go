package mockworker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"fairdispatch/internal/openai"
	"fairdispatch/wire"
)

// The OpenAI shapes the mock answers in (docs/protocol.md, OpenAI-shaped
// requests), after OpenAI's API reference for POST /v1/chat/completions and
// POST /v1/completions: streaming objects chat.completion.chunk and
// text_completion, whole objects chat.completion and text_completion, and
// usage with prompt_tokens_details.cached_tokens.

// maxOutputTokens bounds the output length the mock takes from a body's
// max_tokens: a hostile value must not make a request run for ever.
const maxOutputTokens = 1 << 20

// apiRequest is what the mock reads of an OpenAI request body.
type apiRequest struct {
	api           string // wire.APIChatCompletions or wire.APICompletions
	model         string
	stream        bool
	includeUsage  bool
	maxTokens     int // 0: none given
	created       int64
	id            string
	err           string // why the body cannot be answered; "" when it can
	finishByLimit bool   // the output length is max_tokens
}

// parseAPI reads an OpenAI request body for api.
func parseAPI(api string, body []byte, requestID string, now time.Time) *apiRequest {
	a := &apiRequest{api: api, created: now.Unix()}
	switch api {
	case wire.APIChatCompletions:
		a.id = "chatcmpl-" + requestID
	case wire.APICompletions:
		a.id = "cmpl-" + requestID
	default:
		a.err = fmt.Sprintf("%s %q is not chat.completions or completions", wire.HeaderAPI, api)
		return a
	}
	var b struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		a.err = "the body is not an OpenAI " + api + " request: " + err.Error()
		return a
	}
	a.model, a.stream = b.Model, b.Stream
	a.includeUsage = b.Stream && b.StreamOptions != nil && b.StreamOptions.IncludeUsage
	mt := b.MaxTokens
	if b.MaxCompletionTokens != nil && api == wire.APIChatCompletions {
		mt = b.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 {
			a.err = "max_tokens must be at least 1"
			return a
		}
		a.maxTokens = int(min(*mt, maxOutputTokens))
	}
	return a
}

// words are the mock's output tokens, one a token.
var words = []string{" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit"}

func tokenText(k int) string { return words[(k-1)%len(words)] }

// openaiUsage returns the OpenAI usage object of u.
func openaiUsage(u wire.Usage) *openai.Usage {
	return openai.NewUsage(u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.CachedTokens > 0)
}

// streamChunk returns the streaming object of token k (from 1) of n; the
// last carries finish.
func (a *apiRequest) streamChunk(k, n int, finish string) []byte {
	var fr any // null until the last token
	if k == n {
		fr = finish
	}
	text := tokenText(k)
	var choice map[string]any
	object := "text_completion"
	if a.api == wire.APIChatCompletions {
		object = "chat.completion.chunk"
		delta := map[string]any{"content": text}
		if k == 1 {
			delta["role"] = "assistant"
		}
		choice = map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": fr}
	} else {
		choice = map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": fr}
	}
	return a.object(object, []any{choice}, nil)
}

// usageChunk returns the last streaming object when include_usage is set:
// no choices, the usage.
func (a *apiRequest) usageChunk(u wire.Usage) []byte {
	object := "text_completion"
	if a.api == wire.APIChatCompletions {
		object = "chat.completion.chunk"
	}
	return a.object(object, []any{}, openaiUsage(u))
}

// whole returns the non-streaming object of n tokens.
func (a *apiRequest) whole(n int, finish string, u wire.Usage) []byte {
	var text []byte
	for k := 1; k <= n; k++ {
		text = append(text, tokenText(k)...)
	}
	if a.api == wire.APIChatCompletions {
		return a.object("chat.completion", []any{map[string]any{"index": 0,
			"message": map[string]any{"role": "assistant", "content": string(text)}, "logprobs": nil, "finish_reason": finish}}, openaiUsage(u))
	}
	return a.object("text_completion", []any{map[string]any{"index": 0, "text": string(text), "logprobs": nil,
		"finish_reason": finish}}, openaiUsage(u))
}

func (a *apiRequest) object(object string, choices []any, u *openai.Usage) []byte {
	o := map[string]any{"id": a.id, "object": object, "created": a.created, "model": a.model, "choices": choices}
	if u != nil {
		o["usage"] = u
	}
	b, err := json.Marshal(o)
	if err != nil {
		panic("mock: marshal " + object + ": " + err.Error()) // maps of plain values always marshal
	}
	return b
}

// finishReason is "length" when the output ran to max_tokens, else "stop".
func (a *apiRequest) finishReason() string {
	if a != nil && a.finishByLimit {
		return "length"
	}
	return "stop"
}

// outputTokens returns a request's output length: Dispatch-Output-Tokens,
// else the body's max_tokens, else def.
func outputTokens(header string, a *apiRequest, def int) int {
	if header != "" {
		if v, err := strconv.Atoi(header); err == nil && v >= 1 {
			if a != nil && a.maxTokens > 0 {
				v = min(v, a.maxTokens)
				a.finishByLimit = v == a.maxTokens
			}
			return v
		}
	}
	if a != nil && a.maxTokens > 0 {
		a.finishByLimit = true
		return a.maxTokens
	}
	return def
}
