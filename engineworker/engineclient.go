package engineworker

// A dispatch to an HTTP request to the engine's OpenAI-compatible API, and
// the engine's answer back: vllm/entrypoints/openai/serving_chat.py and
// serving_completion.py (SGLang's python/sglang/srt/entrypoints/openai/ are
// the same shape). A stream asks for usage (stream_options.include_usage),
// whose last chunk (no choices, the usage) is passed on only when the
// caller asked for it. Cancelling the context closes the HTTP stream, which
// is how both engines abort a request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"fairdispatch/internal/openai"
)

// Usage is the cost the engine reports for one request.
type Usage struct {
	PromptTokens, CachedTokens, CompletionTokens uint64
	// Reported is set when the engine sent usage.
	Reported bool
}

// Uncached returns the prompt tokens the engine computed.
func (u Usage) Uncached() uint64 {
	if u.CachedTokens > u.PromptTokens {
		return 0
	}
	return u.PromptTokens - u.CachedTokens
}

// Result is what the engine answered for one request.
type Result struct {
	// Usage is the engine's usage (Reported false when it sent none).
	Usage Usage
	// FinishReason is the last finish_reason the engine gave ("stop",
	// "length", ...), "" when none.
	FinishReason string
	// Chunks counts the chunks passed to emit.
	Chunks int
}

// ErrBadRequest is wrapped by the errors about a request the worker cannot
// send to the engine (an unknown Dispatch-Api, a body that is not a JSON
// object): the request fails without reaching the engine.
var ErrBadRequest = errors.New("engineworker: request cannot be sent to the engine")

// EngineError is an answer of the engine with a status other than 200.
type EngineError struct {
	Status int
	Body   []byte
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("engine answered %d: %.200s", e.Status, e.Body)
}

// maxBody bounds a non-streaming answer and one SSE line.
const maxBody = 16 << 20

// Endpoint returns the engine path of a Dispatch-Api value.
func Endpoint(api string) (string, error) {
	switch api {
	case "chat.completions", "":
		return "/v1/chat/completions", nil
	case "completions":
		return "/v1/completions", nil
	}
	return "", fmt.Errorf("%w: Dispatch-Api %q: want chat.completions or completions", ErrBadRequest, api)
}

// prepare rewrites an OpenAI request body for the engine: a stream asks for
// usage. It returns the body, whether it streams, and whether the caller
// asked for the usage chunk itself.
func prepare(body []byte) (out []byte, stream, callerUsage bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, false, fmt.Errorf("%w: the body is not a JSON object: %v", ErrBadRequest, err)
	}
	if s, ok := m["stream"]; ok {
		_ = json.Unmarshal(s, &stream)
	}
	if !stream {
		return body, false, false, nil
	}
	opts := map[string]json.RawMessage{}
	if o, ok := m["stream_options"]; ok && string(o) != "null" {
		if err := json.Unmarshal(o, &opts); err != nil {
			return nil, false, false, fmt.Errorf("%w: stream_options: %v", ErrBadRequest, err)
		}
	}
	if u, ok := opts["include_usage"]; ok {
		_ = json.Unmarshal(u, &callerUsage)
	}
	opts["include_usage"] = json.RawMessage("true")
	ob, _ := json.Marshal(opts)
	m["stream_options"] = ob
	out, err = json.Marshal(m)
	return out, true, callerUsage, err
}

// answerJSON is what the worker reads of an engine's answer or stream chunk:
// the choices (for their finish_reason) and the usage.
type answerJSON struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   *openai.Usage     `json:"usage"`
	// Error is set in the data line vLLM and SGLang send when the request
	// fails after its stream began (then [DONE]): {"error": {"message",
	// "type", "code"}}.
	Error json.RawMessage `json:"error"`
}

// streamError returns the engine error of a data line carrying one (v has
// an error and no choices), with the status its code gives (500 when it
// gives none): the request failed in the engine mid-stream.
func streamError(v *answerJSON) error {
	if len(v.Error) == 0 || string(v.Error) == "null" || len(v.Choices) > 0 {
		return nil
	}
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	status := http.StatusInternalServerError
	if json.Unmarshal(v.Error, &e) == nil {
		var code int
		if json.Unmarshal(e.Code, &code) == nil && code >= 400 && code < 600 {
			status = code
		}
	}
	return &EngineError{Status: status, Body: v.Error}
}

// usageOf returns what the worker reports of an engine's usage object.
func usageOf(u *openai.Usage) Usage {
	return Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.Cached(), Reported: true}
}

// finishReason returns the last non-null finish_reason of choices, or had.
func finishReason(choices []json.RawMessage, had string) string {
	for _, c := range choices {
		var v struct {
			FinishReason *string `json:"finish_reason"`
		}
		if json.Unmarshal(c, &v) == nil && v.FinishReason != nil && *v.FinishReason != "" {
			had = *v.FinishReason
		}
	}
	return had
}

// Call sends one request to the engine at base and passes its answer to
// emit: each streaming chunk (the JSON of one SSE data line, [DONE] left
// out, the usage chunk left out unless the caller asked for it), or the
// whole answer of a non-streaming request (whole true). rank >= 0 adds the
// X-data-parallel-rank header (vLLM's and SGLang's way to pin a DP rank).
// An error of emit stops the call. Cancelling ctx (or emit failing) closes
// the HTTP stream, which aborts the request in the engine.
func Call(ctx context.Context, c *http.Client, base, api string, body []byte, rank int, emit func(chunk []byte, whole bool) error) (Result, error) {
	var res Result
	path, err := Endpoint(api)
	if err != nil {
		return res, err
	}
	body, stream, callerUsage, err := prepare(body)
	if err != nil {
		return res, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if rank >= 0 {
		req.Header.Set("X-data-parallel-rank", strconv.Itoa(rank))
	}
	resp, err := c.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return res, &EngineError{Status: resp.StatusCode, Body: b}
	}
	if !stream {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if err != nil {
			return res, err
		}
		var v answerJSON
		if err := json.Unmarshal(b, &v); err != nil {
			return res, fmt.Errorf("engineworker: engine answer: %w", err)
		}
		if v.Usage != nil {
			res.Usage = usageOf(v.Usage)
		}
		res.FinishReason = finishReason(v.Choices, "")
		res.Chunks = 1
		return res, emit(b, true)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxBody)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue // blank lines, comments, event: lines
		}
		data := bytes.TrimSpace(line[5:])
		if string(data) == "[DONE]" {
			return res, nil
		}
		var v answerJSON
		if err := json.Unmarshal(data, &v); err != nil {
			return res, fmt.Errorf("engineworker: stream chunk: %w", err)
		}
		if err := streamError(&v); err != nil {
			return res, err // not a chunk: the caller must not read it as one
		}
		res.FinishReason = finishReason(v.Choices, res.FinishReason)
		if v.Usage != nil {
			u := usageOf(v.Usage)
			// continuous_usage_stats puts usage without cached tokens in
			// every chunk: the last one, with the details, wins.
			if u.CachedTokens == 0 && res.Usage.CachedTokens > 0 && u.PromptTokens == res.Usage.PromptTokens {
				u.CachedTokens = res.Usage.CachedTokens
			}
			res.Usage = u
			if len(v.Choices) == 0 && !callerUsage {
				continue // the usage chunk the worker asked for
			}
		}
		res.Chunks++
		if err := emit(append([]byte(nil), data...), false); err != nil {
			return res, err
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, errors.New("engineworker: stream ended without [DONE]")
}
