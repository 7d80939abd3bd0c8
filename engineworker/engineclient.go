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
	return "", fmt.Errorf("engineworker: Dispatch-Api %q: want chat.completions or completions", api)
}

// prepare rewrites an OpenAI request body for the engine: a stream asks for
// usage. It returns the body, whether it streams, and whether the caller
// asked for the usage chunk itself.
func prepare(body []byte) (out []byte, stream, callerUsage bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, false, fmt.Errorf("engineworker: request body: %w", err)
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
			return nil, false, false, fmt.Errorf("engineworker: stream_options: %w", err)
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

type usageJSON struct {
	PromptTokens        uint64 `json:"prompt_tokens"`
	CompletionTokens    uint64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens uint64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *usageJSON) usage() Usage {
	out := Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Reported: true}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// Call sends one request to the engine at base and passes its answer to
// emit: each streaming chunk (the JSON of one SSE data line, [DONE] left
// out), or the whole answer of a non-streaming request. rank >= 0 adds the
// X-data-parallel-rank header (vLLM's and SGLang's way to pin a DP rank).
// It returns the engine's usage and the chunks emitted.
func Call(ctx context.Context, c *http.Client, base, api string, body []byte, rank int, emit func([]byte) error) (Usage, int, error) {
	path, err := Endpoint(api)
	if err != nil {
		return Usage{}, 0, err
	}
	body, stream, callerUsage, err := prepare(body)
	if err != nil {
		return Usage{}, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return Usage{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if rank >= 0 {
		req.Header.Set("X-data-parallel-rank", strconv.Itoa(rank))
	}
	resp, err := c.Do(req)
	if err != nil {
		return Usage{}, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return Usage{}, 0, &EngineError{Status: resp.StatusCode, Body: b}
	}
	if !stream {
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if err != nil {
			return Usage{}, 0, err
		}
		var v struct{ Usage *usageJSON }
		if err := json.Unmarshal(b, &v); err != nil {
			return Usage{}, 0, fmt.Errorf("engineworker: engine answer: %w", err)
		}
		var u Usage
		if v.Usage != nil {
			u = v.Usage.usage()
		}
		return u, 1, emit(b)
	}
	var u Usage
	chunks := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxBody)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue // blank lines, comments, event: lines
		}
		data := bytes.TrimSpace(line[5:])
		if string(data) == "[DONE]" {
			return u, chunks, nil
		}
		var v struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *usageJSON        `json:"usage"`
		}
		if err := json.Unmarshal(data, &v); err != nil {
			return u, chunks, fmt.Errorf("engineworker: stream chunk: %w", err)
		}
		if v.Usage != nil {
			u = v.Usage.usage()
			if len(v.Choices) == 0 && !callerUsage {
				continue // the usage chunk the worker asked for
			}
		}
		chunks++
		if err := emit(append([]byte(nil), data...)); err != nil {
			return u, chunks, err
		}
	}
	if err := sc.Err(); err != nil {
		return u, chunks, err
	}
	return u, chunks, errors.New("engineworker: stream ended without [DONE]")
}
