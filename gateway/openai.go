package gateway

// The OpenAI request bodies the gateway reads, after the OpenAI API
// reference's "Create chat completion" and "Create completion" and the
// official clients that send them (openai-go's ChatCompletionNewParams and
// CompletionNewParams, openai-node's ChatCompletionCreateParams): only the
// fields the gateway needs are decoded; every other field is forwarded to the
// engine untouched.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"fairdispatch/tokenizer"
	"fairdispatch/wire"
)

// The endpoints, as Dispatch-Api names them (docs/protocol.md, Responses).
const (
	APIChat        = wire.APIChatCompletions
	APICompletions = wire.APICompletions
)

// Limits bounds what one request body may hold.
type Limits struct {
	// MaxDepth is the deepest nesting of JSON arrays and objects (default 32).
	MaxDepth int
	// MaxMessages bounds a chat's messages and a completion's prompts (default 4096).
	MaxMessages int
	// MaxStop bounds the stop sequences (default 4, as the API allows).
	MaxStop int
}

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = 32
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = 4096
	}
	if l.MaxStop <= 0 {
		l.MaxStop = 4
	}
	return l
}

// request is an OpenAI request as the gateway read it.
type request struct {
	api          string
	model        string
	stream       bool
	includeUsage bool
	maxTokens    uint64 // the output bound the engine applies; 0: not given
	maxField     string // the field maxTokens came from
	messages     []tokenizer.Message
	prompt       string   // completions: the prompt text (several prompts: joined)
	promptIDs    []uint32 // completions: a prompt given as token ids
	multimodal   bool     // a content part that is not text, tools or tool calls: no exact tokens
	fields       map[string]json.RawMessage
}

// badRequest is a 400 with a code (invalid_request_error).
func badRequest(code, param, f string, a ...any) *apiError {
	return &apiError{status: 400, typ: typeInvalidRequest, code: code, param: param, msg: fmt.Sprintf(f, a...)}
}

// checkDepth reports whether the JSON text b nests arrays and objects at
// most max deep. It scans bytes, skipping strings; it does not validate.
func checkDepth(b []byte, max int) bool {
	depth, inStr, esc := 0, false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				return false
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return true
}

// parseRequest reads an OpenAI request body of api (APIChat or
// APICompletions) within lim.
func parseRequest(api string, body []byte, lim Limits) (*request, *apiError) {
	if !utf8.Valid(body) {
		return nil, badRequest("invalid_utf8", "", "the request body is not valid UTF-8")
	}
	if !checkDepth(body, lim.MaxDepth) {
		return nil, badRequest("json_too_deep", "", "the request body nests JSON deeper than %d levels", lim.MaxDepth)
	}
	r := &request{api: api}
	if err := json.Unmarshal(body, &r.fields); err != nil || r.fields == nil {
		return nil, badRequest("invalid_json", "", "the request body is not a JSON object: %v", errText(err))
	}
	if err := json.Unmarshal(r.fields["model"], &r.model); err != nil || r.model == "" {
		return nil, badRequest("invalid_value", "model", "model: want a non-empty string")
	}
	if len(r.model) > 256 {
		return nil, badRequest("field_too_large", "model", "model: at most 256 bytes")
	}
	if raw, ok := r.fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &r.stream); err != nil {
			return nil, badRequest("invalid_value", "stream", "stream: want true or false")
		}
	}
	if raw, ok := r.fields["stream_options"]; ok && !isNull(raw) {
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, badRequest("invalid_value", "stream_options", "stream_options: want an object")
		}
		if !r.stream {
			return nil, badRequest("invalid_value", "stream_options", "stream_options: only with stream: true")
		}
		r.includeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	// The engines bound a chat's output by max_completion_tokens when it is
	// given, else by max_tokens, its deprecated name (vLLM and SGLang read
	// them in that order); a completion has max_tokens alone.
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := r.fields[name]
		if !ok || isNull(raw) {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil || n == 0 {
			return nil, badRequest("invalid_value", name, "%s: want a positive integer", name)
		}
		if name == "max_tokens" || api == APIChat {
			r.maxTokens, r.maxField = n, name
		}
	}
	if raw, ok := r.fields["n"]; ok && !isNull(raw) && string(bytes.TrimSpace(raw)) != "1" {
		return nil, badRequest("unsupported_value", "n", "n: only 1 is supported")
	}
	if raw, ok := r.fields["stop"]; ok && !isNull(raw) {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil && len(list) > lim.MaxStop {
			return nil, badRequest("field_too_large", "stop", "stop: at most %d sequences", lim.MaxStop)
		}
	}
	for _, name := range promptFields {
		if raw, ok := r.fields[name]; ok && !isNull(raw) {
			r.multimodal = true // the engine's prompt is not the one the gateway would render
		}
	}
	if api == APIChat {
		if e := r.readMessages(lim); e != nil {
			return nil, e
		}
	} else if e := r.readPrompt(lim); e != nil {
		return nil, e
	}
	return r, nil
}

// promptFields are the request fields that change the prompt the engine
// makes of a request (vLLM's and SGLang's chat and completion protocols):
// the template renders the tools and documents, the others change what is
// rendered or how it is encoded. A request with any of them is estimated.
var promptFields = []string{"tools", "documents", "chat_template", "chat_template_kwargs",
	"add_generation_prompt", "continue_final_message", "add_special_tokens"}

func errText(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// readMessages reads messages: each a role and a content that is a string or
// an array of parts ({"type":"text","text":...} are read; others mark the
// request multimodal).
func (r *request) readMessages(lim Limits) *apiError {
	var msgs []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls json.RawMessage `json:"tool_calls"`
		Name      json.RawMessage `json:"name"`
	}
	if err := json.Unmarshal(r.fields["messages"], &msgs); err != nil || len(msgs) == 0 {
		return badRequest("invalid_value", "messages", "messages: want a non-empty array of messages")
	}
	if len(msgs) > lim.MaxMessages {
		return badRequest("field_too_large", "messages", "messages: at most %d", lim.MaxMessages)
	}
	r.messages = make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		if m.Role == "" || len(m.Role) > 64 {
			return badRequest("invalid_value", fmt.Sprintf("messages[%d].role", i), "messages[%d].role: want a role", i)
		}
		r.messages[i].Role = m.Role
		if len(m.ToolCalls) > 0 || len(m.Name) > 0 {
			r.multimodal = true // the template would see more than role and content
		}
		if len(m.Content) == 0 || isNull(m.Content) {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			r.messages[i].Content = s
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return badRequest("invalid_value", fmt.Sprintf("messages[%d].content", i), "messages[%d].content: want a string or an array of content parts", i)
		}
		// Text parts joined by newlines, as vLLM joins them for a template
		// that takes a string.
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			} else {
				r.multimodal = true
			}
		}
		r.messages[i].Content = strings.Join(texts, "\n")
	}
	return nil
}

// readPrompt reads a completion's prompt: a string, an array of strings, an
// array of token ids, or an array of such arrays.
func (r *request) readPrompt(lim Limits) *apiError {
	raw := r.fields["prompt"]
	if len(raw) == 0 || isNull(raw) {
		return badRequest("invalid_value", "prompt", "prompt: required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		r.prompt = s
		return nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) > lim.MaxMessages {
			return badRequest("field_too_large", "prompt", "prompt: at most %d prompts", lim.MaxMessages)
		}
		if len(strs) > 1 {
			return badRequest("unsupported_value", "prompt", "prompt: one prompt per request")
		}
		if len(strs) == 1 {
			r.prompt = strs[0]
		}
		return nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		r.promptIDs = ids
		return nil
	}
	var idss [][]uint32
	if json.Unmarshal(raw, &idss) == nil && len(idss) == 1 {
		r.promptIDs = idss[0]
		return nil
	}
	return badRequest("invalid_value", "prompt", "prompt: want a string or an array of token ids (one prompt)")
}

// normalise returns the body sent to the engine: the pool's model name,
// stream_options.include_usage on for a streaming request (the gateway
// needs the usage; it drops the usage chunk when the client did not ask for
// it), and maxTokens when the client gave none.
func (r *request) normalise(engineModel string, defaultMax uint64) ([]byte, error) {
	f := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		f[k] = v
	}
	f["model"], _ = json.Marshal(engineModel)
	if r.stream {
		// The client's other stream options (vLLM's continuous_usage_stats)
		// go through; parse checked it is an object.
		so := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok && !isNull(raw) {
			_ = json.Unmarshal(raw, &so)
		}
		so["include_usage"] = json.RawMessage("true")
		f["stream_options"], _ = json.Marshal(so)
	}
	if r.maxTokens == 0 && defaultMax > 0 {
		f["max_tokens"] = json.RawMessage(strconv.FormatUint(defaultMax, 10))
		r.maxTokens, r.maxField = defaultMax, "max_tokens"
	}
	// Without HTML escaping: json.Marshal writes each <, > and & of a
	// json.RawMessage as a six-byte escape, and a prompt of code or markup
	// would grow up to six times, past the NATS server's max_payload.
	return wire.Marshal(f)
}
