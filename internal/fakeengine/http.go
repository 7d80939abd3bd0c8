package fakeengine

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"fairdispatch/internal/openai"
)

// Handler returns the engine's HTTP API.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.complete(w, r, false) })
	mux.HandleFunc("GET /health", e.health)
	mux.HandleFunc("GET /metrics", e.metrics)
	mux.HandleFunc("POST /tokenize", e.tokenize)
	mux.HandleFunc("GET /v1/models", e.models)
	mux.HandleFunc("GET /get_server_info", e.serverInfo)
	mux.HandleFunc("GET /server_info", e.serverInfo)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := e.hangCh(); h != nil {
			select { // accepted, read, never answered
			case <-h:
			case <-r.Context().Done():
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// request is the part of an OpenAI request the fake reads
// (vllm/entrypoints/openai/protocol.py ChatCompletionRequest, CompletionRequest).
type request struct {
	Model               string    `json:"model"`
	Messages            []Message `json:"messages"`
	Prompt              any       `json:"prompt"`
	MaxTokens           *int      `json:"max_tokens"`
	MaxCompletionTokens *int      `json:"max_completion_tokens"`
	Stream              bool      `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
}

func (q *request) tokens(chat bool, tok func([]Message, bool) ([]uint32, error)) ([]uint32, error) {
	if chat {
		if len(q.Messages) == 0 {
			return nil, fmt.Errorf("messages: at least one is required")
		}
		gen := q.AddGenerationPrompt == nil || *q.AddGenerationPrompt
		if tok != nil {
			return tok(q.Messages, gen)
		}
		return TokenizeChat(q.Messages, gen), nil
	}
	switch p := q.Prompt.(type) {
	case string:
		return TokenizeText(p), nil
	case nil:
		return nil, fmt.Errorf("prompt: required")
	}
	return nil, fmt.Errorf("prompt: only a string is supported by the fake")
}

func (e *Engine) usage(prompt, cached, out int) *openai.Usage {
	// vLLM reports the details with --enable-prompt-tokens-details and only
	// when something was cached (serving_chat.py: "if
	// self.enable_prompt_tokens_details and num_cached_tokens"); SGLang with
	// --enable-cache-report always.
	details := e.cfg.PromptTokensDetails && (cached > 0 || e.cfg.Kind == "sglang")
	return openai.NewUsage(uint64(prompt), uint64(out), uint64(cached), details)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "param": nil, "code": code})
}

func (e *Engine) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var q request
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	toks, err := q.tokens(chat, e.cfg.ChatTokenizer)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.Model != "" && q.Model != e.cfg.Model {
		writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", q.Model))
		return
	}
	out := 16
	if q.MaxCompletionTokens != nil {
		out = *q.MaxCompletionTokens
	} else if q.MaxTokens != nil {
		out = *q.MaxTokens
	}
	out = max(out, 1)
	id := "cmpl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	object := "text_completion"
	if chat {
		id, object = "chatcmpl-"+id[5:], "chat.completion"
	}
	created := time.Now().Unix()
	word := func(i int) string { return " tok" + strconv.Itoa(i) }
	choice := func(i int, final bool) map[string]any {
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": nil}
		if final {
			c["finish_reason"] = "length"
		}
		if chat {
			c["delta"] = map[string]any{"content": word(i)}
		} else {
			c["text"] = word(i)
		}
		return c
	}
	if !q.Stream {
		var text strings.Builder
		cached, err := e.run(r.Context(), toks, out, func(i int) error { text.WriteString(word(i)); return nil })
		if err != nil {
			return // the client went away: vLLM aborts the request
		}
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": "length"}
		if chat {
			c["message"] = map[string]any{"role": "assistant", "content": text.String()}
		} else {
			c["text"] = text.String()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": object, "created": created, "model": e.cfg.Model,
			"choices": []any{c}, "usage": e.usage(len(toks), cached, out)})
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunkObj := object + ".chunk"
	if !chat {
		chunkObj = object
	}
	send := func(v map[string]any) error {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return r.Context().Err()
	}
	chunk := func(choices []any) map[string]any {
		return map[string]any{"id": id, "object": chunkObj, "created": created, "model": e.cfg.Model, "choices": choices}
	}
	continuous := q.StreamOptions != nil && q.StreamOptions.ContinuousUsageStats && q.StreamOptions.IncludeUsage
	cached, err := e.run(r.Context(), toks, out, func(i int) error {
		if i == 0 && chat { // vLLM's first chat chunk carries the role
			first := chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil}})
			if err := send(first); err != nil {
				return err
			}
		}
		c := chunk([]any{choice(i, i == out-1)})
		if continuous {
			c["usage"] = openai.NewUsage(uint64(len(toks)), uint64(i+1), 0, false)
		}
		return send(c)
	})
	if err != nil {
		return
	}
	if q.StreamOptions != nil && q.StreamOptions.IncludeUsage {
		c := chunk([]any{})
		c["usage"] = e.usage(len(toks), cached, out)
		if send(c) != nil {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func (e *Engine) tokenize(w http.ResponseWriter, r *http.Request) {
	var q request
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	toks, err := q.tokens(len(q.Messages) > 0, e.cfg.ChatTokenizer)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "max_model_len": 32768, "tokens": toks})
}

func (e *Engine) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	owner := "vllm"
	if e.cfg.Kind == "sglang" {
		owner = "sglang"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": e.cfg.Model, "object": "model", "created": 0, "owned_by": owner, "root": e.cfg.Model, "max_model_len": 32768}}})
}

// serverInfo answers as SGLang's /get_server_info: the server args at the
// top level and the scheduler's max_total_num_tokens.
func (e *Engine) serverInfo(w http.ResponseWriter, _ *http.Request) {
	if e.cfg.Kind != "sglang" {
		http.NotFound(w, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"model_path": e.cfg.Model, "served_model_name": e.cfg.Model, "page_size": e.cfg.BlockSize,
		"max_running_requests": e.cfg.MaxNumSeqs, "chunked_prefill_size": e.cfg.MaxNumBatchedTokens,
		"dp_size": 1, "max_total_num_tokens": e.cfg.NumGPUBlocks * e.cfg.BlockSize, "version": "fake",
	})
}

// metrics writes the Prometheus text of vllm/v1/metrics/loggers.py (labels
// model_name and engine) or python/sglang/srt/metrics/collector.py.
func (e *Engine) metrics(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	e.stats.Scrapes++
	e.mu.Unlock()
	s := e.Stats()
	usage := min(float64(s.UsedBlocks)/float64(e.cfg.NumGPUBlocks), 1)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	if e.cfg.Kind == "sglang" {
		l := fmt.Sprintf(`{model_name=%q}`, e.cfg.Model)
		fmt.Fprintf(&b, "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs%s %d\n", l, s.Running)
		fmt.Fprintf(&b, "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs%s %d\n", l, s.Waiting)
		fmt.Fprintf(&b, "# HELP sglang:token_usage The token usage.\n# TYPE sglang:token_usage gauge\nsglang:token_usage%s %g\n", l, usage)
		fmt.Fprintf(&b, "# HELP sglang:num_used_tokens The number of used tokens.\n# TYPE sglang:num_used_tokens gauge\nsglang:num_used_tokens%s %d\n", l, s.UsedBlocks*e.cfg.BlockSize)
		hit := 0.0
		if s.PromptTokens > 0 {
			hit = float64(s.CachedTokens) / float64(s.PromptTokens)
		}
		fmt.Fprintf(&b, "# HELP sglang:cache_hit_rate The prefix cache hit rate.\n# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate%s %g\n", l, hit)
		fmt.Fprintf(&b, "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total%s %d\n", l, s.PromptTokens)
		fmt.Fprintf(&b, "# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total%s %d\n", l, s.CachedTokens)
	} else {
		l := fmt.Sprintf(`{engine="%d",model_name=%q}`, e.cfg.DPRank, e.cfg.Model)
		fmt.Fprintf(&b, "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d.0\n", l, s.Running)
		fmt.Fprintf(&b, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %d.0\n", l, s.Waiting)
		fmt.Fprintf(&b, "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s %g\n", l, usage)
		fmt.Fprintf(&b, "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total%s %d.0\n", l, s.PromptTokens)
		fmt.Fprintf(&b, "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total%s %d.0\n", l, s.CachedTokens)
		fmt.Fprintf(&b, "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total%s %d.0\n", l, s.PromptTokens-s.CachedTokens)
		fmt.Fprintf(&b, "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total%s %d.0\n", l, s.OutputTokens)
		fmt.Fprintf(&b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"+
			"vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"%d\",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"%d\"} 1.0\n",
			e.cfg.BlockSize, e.cfg.DPRank, e.cfg.NumGPUBlocks)
	}
	_, _ = w.Write([]byte(b.String()))
}

// health answers /health after the engine's HealthDelay.
func (e *Engine) health(w http.ResponseWriter, r *http.Request) {
	if d := e.cfg.HealthDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
