package engineworker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/natstest"
)

// startFake serves a fake engine over HTTP for one test.
func startFake(t *testing.T, cfg fakeengine.Config) (*fakeengine.Engine, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := fakeengine.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Hang(false)
		srv.CloseClientConnections() // Close waits for the requests: end them
		srv.Close()
		e.Close()
		cancel()
	})
	return e, srv.URL
}

func chatBody(stream bool, extra string) []byte {
	s := `{"model":"fake-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"one two three"}],"max_tokens":3`
	if stream {
		s += `,"stream":true`
	}
	return []byte(s + extra + "}")
}

// TestCallStreamAsksForUsageAndStripsIt: a stream that did not ask for
// usage gets the engine's usage anyway (the worker asked for it), but not
// its usage chunk; finish_reason comes from the last chunk.
func TestCallStreamAsksForUsageAndStripsIt(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, fakeengine.Config{PromptTokensDetails: true})
	var chunks []string
	res, err := Call(context.Background(), http.DefaultClient, url, "chat.completions", chatBody(true, ""), -1, func(b []byte, _ bool) error {
		chunks = append(chunks, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The role chunk, then one per token.
	if len(chunks) != 4 || res.Chunks != 4 {
		t.Fatalf("%d chunks (Result %d), want 4: %q", len(chunks), res.Chunks, chunks)
	}
	for _, c := range chunks {
		if strings.Contains(c, `"usage"`) || !strings.Contains(c, `"chat.completion.chunk"`) {
			t.Fatalf("chunk %s: want a chat.completion.chunk without usage", c)
		}
	}
	// BOS, system marker, 2 words, end, user marker, 3 words, end, assistant.
	if !res.Usage.Reported || res.Usage.PromptTokens != 11 || res.Usage.CompletionTokens != 3 {
		t.Fatalf("usage %+v, want 11 prompt and 3 completion tokens, reported", res.Usage)
	}
	if res.FinishReason != "length" {
		t.Fatalf("finish reason %q, want length", res.FinishReason)
	}
}

// TestCallStreamKeepsUsageWhenAsked: a caller that asked for usage gets the
// engine's usage chunk as its last chunk, cached tokens included.
func TestCallStreamKeepsUsageWhenAsked(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, fakeengine.Config{PromptTokensDetails: true, BlockSize: 4})
	body := chatBody(true, `,"stream_options":{"include_usage":true}`)
	var last string
	for range 2 { // the second finds the first's blocks cached
		res, err := Call(context.Background(), http.DefaultClient, url, "chat.completions", body, -1, func(b []byte, _ bool) error {
			last = string(b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Chunks != 5 {
			t.Fatalf("%d chunks, want 5 (role, 3 tokens, usage)", res.Chunks)
		}
		if res.Usage.CachedTokens != 0 && res.Usage.CachedTokens != 8 {
			t.Fatalf("cached %d, want 0 then 8 (two full blocks of 4 of 11 tokens)", res.Usage.CachedTokens)
		}
	}
	var v struct {
		Choices []any `json:"choices"`
		Usage   struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(last), &v); err != nil || len(v.Choices) != 0 || v.Usage.PromptTokensDetails.CachedTokens != 8 {
		t.Fatalf("last chunk %s: want the usage chunk with 8 cached tokens", last)
	}
}

// TestCallWhole: a request without stream is one chunk, the engine's whole
// answer, with its usage and finish reason read.
func TestCallWhole(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, fakeengine.Config{})
	var got []byte
	res, err := Call(context.Background(), http.DefaultClient, url, "completions",
		[]byte(`{"model":"fake-model","prompt":"a b c","max_tokens":2}`), -1, func(b []byte, _ bool) error { got = b; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks != 1 || !strings.Contains(string(got), `"text_completion"`) || res.Usage.PromptTokens != 4 || res.Usage.CompletionTokens != 2 || res.FinishReason != "length" {
		t.Fatalf("result %+v, chunk %s", res, got)
	}
}

// TestCallErrors: an engine's 4xx is an EngineError; a request that cannot
// be sent is ErrBadRequest, before any HTTP.
func TestCallErrors(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, fakeengine.Config{})
	emit := func([]byte, bool) error { return nil }
	_, err := Call(context.Background(), http.DefaultClient, url, "chat.completions", []byte(`{"model":"other","messages":[{"role":"user","content":"x"}]}`), -1, emit)
	var ee *EngineError
	if !errors.As(err, &ee) || ee.Status != http.StatusNotFound {
		t.Fatalf("unknown model: %v, want an EngineError 404", err)
	}
	if _, err := Call(context.Background(), http.DefaultClient, url, "embeddings", chatBody(false, ""), -1, emit); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Dispatch-Api embeddings: %v, want ErrBadRequest", err)
	}
	if _, err := Call(context.Background(), http.DefaultClient, url, "chat.completions", []byte(`[1]`), -1, emit); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a body that is not an object: %v, want ErrBadRequest", err)
	}
}

// TestCallAbortClosesTheStream: cancelling the context, or emit failing,
// closes the HTTP stream, and the engine aborts the request.
func TestCallAbortClosesTheStream(t *testing.T) {
	t.Parallel()
	e, url := startFake(t, fakeengine.Config{DecodePerToken: 20 * time.Millisecond})
	body := chatBody(true, "")
	body = []byte(strings.Replace(string(body), `"max_tokens":3`, `"max_tokens":100000`, 1))
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Call(ctx, http.DefaultClient, url, "chat.completions", body, -1, func([]byte, bool) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	stop := errors.New("stop")
	if _, err := Call(context.Background(), http.DefaultClient, url, "chat.completions", body, -1, func([]byte, bool) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("emit's error: %v", err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { s := e.Stats(); return s.Aborted == 2 && s.Running == 0 },
		"the engine aborts both requests (stats %+v)", e.Stats())
}

// TestCallPinsTheRank: rank >= 0 sends X-data-parallel-rank, the header
// vLLM and SGLang read to pin a data-parallel rank.
func TestCallPinsTheRank(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-data-parallel-rank")
		_, _ = w.Write([]byte(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	defer srv.Close()
	for _, rank := range []int{3, -1} {
		if _, err := Call(context.Background(), srv.Client(), srv.URL, "completions", []byte(`{"prompt":"x"}`), rank, func([]byte, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := <-got, <-got; a != "3" || b != "" {
		t.Fatalf("X-data-parallel-rank %q and %q, want 3 and none", a, b)
	}
}

// TestCallStreamError: the error line an engine sends when a request fails
// after its stream began (vLLM's and SGLang's {"error": {...}}, then
// [DONE]) ends the call with an EngineError of the line's code, not a
// chunk; a line without a code reads as 500.
func TestCallStreamError(t *testing.T) {
	for _, tc := range []struct {
		line   string
		status int
	}{
		{`{"error": {"object": "error", "message": "boom", "type": "BadRequestError", "param": null, "code": 400}}`, 400},
		{`{"error": {"message": "engine dead", "type": "InternalServerError"}}`, 500},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: " + tc.line + "\n\ndata: [DONE]\n\n"))
		}))
		var chunks []string
		_, err := Call(context.Background(), http.DefaultClient, srv.URL, "chat.completions", chatBody(true, ""), -1, func(b []byte, _ bool) error {
			chunks = append(chunks, string(b))
			return nil
		})
		srv.Close()
		var ee *EngineError
		if !errors.As(err, &ee) || ee.Status != tc.status || len(chunks) != 1 {
			t.Errorf("%s: err %v, chunks %q; want an EngineError %d after the one chunk", tc.line, err, chunks, tc.status)
		}
		if ee != nil && !strings.Contains(errorText(ee), "boom") && !strings.Contains(errorText(ee), "engine dead") {
			t.Errorf("error text %q does not carry the engine's message", errorText(ee))
		}
	}
}

// TestErrorTextReadsEitherShape: the end marker carries the engine's own
// message whether its error body has it at the top level or in an OpenAI
// error object, as newer vLLM answers.
func TestErrorTextReadsEitherShape(t *testing.T) {
	for _, body := range []string{
		`{"object":"error","message":"too long","type":"BadRequestError","code":400}`,
		`{"error":{"message":"too long","type":"BadRequestError","param":null,"code":400}}`,
	} {
		if got := errorText(&EngineError{Status: 400, Body: []byte(body)}); got != "engine answered 400: too long" {
			t.Errorf("%s: %q", body, got)
		}
	}
}
