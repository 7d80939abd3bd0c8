package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

const testConfig = `
models:
  - name: m1
    prefix: dispatch
    max_tokens: 1000
tenants:
  - name: tenant-a
    api_key_sha256: [%A%]
    classes: [premium, regular]
    max_concurrent: 3
    deadline_ms: 60000
  - name: tenant-b
    api_key_sha256: [%B%]
    classes: [regular]
`

type gw struct {
	t    *testing.T
	url  string
	nc   *nats.Conn
	resp *responder
	srv  *Server
}

func startGateway(t *testing.T, mod func(*Options)) *gw {
	return startGatewayWith(t, testConfig, mod)
}

// startGatewayWith is startGateway with the gateway file config (testConfig
// with other values).
func startGatewayWith(t *testing.T, config string, mod func(*Options)) *gw {
	srv, nc := natstest.StartServer(t)
	cfgText := strings.NewReplacer("%A%", HashKey("sk-a"), "%B%", HashKey("sk-b")).Replace(config)
	cfg, err := ParseConfig("test.yaml", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	resp := startResponder(t, natstest.Connect(t, srv))
	c, err := caller.New(nc, caller.Config{BrokenAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Config: cfg, Callers: map[string]*caller.Caller{"dispatch": c}, AttachWait: 500 * time.Millisecond,
		Registerer: prometheus.NewRegistry(), Log: zerolog.Nop()}
	if mod != nil {
		mod(&opt)
	}
	s, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &gw{t: t, url: hs.URL, nc: natstest.Connect(t, srv), resp: resp, srv: s}
}

func (g *gw) post(path, key, body string, hdr ...string) (*http.Response, string) {
	g.t.Helper()
	req, _ := http.NewRequest("POST", g.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

type errBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Param   *string `json:"param"`
	} `json:"error"`
}

func decodeErr(t *testing.T, body string) errBody {
	t.Helper()
	var e errBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error body %q is not in the OpenAI shape", body)
	}
	return e
}

func chatBody(content string, extra string) string {
	return `{"model":"m1","max_tokens":3,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":` + jsonString(content) + `}]` + extra + `}`
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestErrorsBeforePublishing(t *testing.T) {
	g := startGateway(t, nil)
	deep := `{"model":"m1","messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	for _, tc := range []struct {
		name, key, body string
		hdr             []string
		status          int
		code            string
	}{
		{"no key", "", chatBody("hi", ""), nil, 401, "invalid_api_key"},
		{"almost right key", "sk-b ", chatBody("hi", ""), nil, 200, ""}, // surrounding space is trimmed: the same key
		{"almost right key", "sk-c", chatBody("hi", ""), nil, 401, "invalid_api_key"},
		{"key with one more byte", "sk-aa", chatBody("hi", ""), nil, 401, "invalid_api_key"},
		{"class not allowed", "sk-b", chatBody("hi", ""), []string{HeaderClass, "premium"}, 403, "class_not_allowed"},
		{"unknown model", "sk-a", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, nil, 404, "model_not_found"},
		{"max_tokens 10^12", "sk-a", `{"model":"m1","max_tokens":1000000000000,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "max_tokens_too_large"},
		{"max_completion_tokens over the limit, max_tokens within", "sk-a", `{"model":"m1","max_tokens":3,"max_completion_tokens":900000,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "max_tokens_too_large"},
		{"deep JSON", "sk-a", deep, nil, 400, "json_too_deep"},
		{"invalid UTF-8", "sk-a", "{\"model\":\"m1\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", nil, 400, "invalid_utf8"},
		{"not JSON", "sk-a", `{"model":`, nil, 400, "invalid_json"},
		{"no messages", "sk-a", `{"model":"m1","messages":[]}`, nil, 400, "invalid_value"},
		{"bad priority", "sk-a", chatBody("hi", ""), []string{HeaderPriority, "-1"}, 400, "invalid_header"},
		{"priority above the tenant's", "sk-a", chatBody("hi", ""), []string{HeaderPriority, "5"}, 403, "priority_not_allowed"},
		{"bad deadline", "sk-a", chatBody("hi", ""), []string{HeaderDeadlineMs, "0"}, 400, "invalid_header"},
		{"n=2", "sk-a", chatBody("hi", `,"n":2`), nil, 400, "unsupported_value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := g.post("/v1/chat/completions", tc.key, tc.body, tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.code != "" {
				if e := decodeErr(t, body); e.Error.Code != tc.code {
					t.Fatalf("code %q, want %q: %s", e.Error.Code, tc.code, body)
				}
			}
		})
	}
	// None of the refused ones was published.
	if n := len(g.resp.headers()); n != 1 {
		t.Fatalf("%d requests published, want 1 (the one with the trimmed key)", n)
	}
}

func TestBodyTooLarge(t *testing.T) {
	g := startGateway(t, func(o *Options) { o.MaxBodyBytes = 4096 })
	resp, body := g.post("/v1/completions", "sk-a", `{"model":"m1","prompt":"`+strings.Repeat("x", 5000)+`"}`)
	if resp.StatusCode != 413 || decodeErr(t, body).Error.Code != "body_too_large" {
		t.Fatalf("status %d %s, want 413 body_too_large", resp.StatusCode, body)
	}
}

func TestRejectionsMapToStatuses(t *testing.T) {
	g := startGateway(t, nil)
	for _, tc := range []struct {
		code       string
		status     int
		retryAfter string
	}{
		{"queue_full", 429, "1"},
		{"budget_exceeded", 429, "3"}, // retry_after_ms 2500, rounded up
		{"all_workers_overloaded", 503, "1"},
		{"no_endpoints", 503, "1"},
		{"expired", 504, ""},
		{"deadline_unreachable", 504, ""},
		{"bad_request", 400, ""},
	} {
		t.Run(tc.code, func(t *testing.T) {
			resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("reject:"+tc.code, ""))
			if resp.StatusCode != tc.status || decodeErr(t, body).Error.Code != tc.code {
				t.Fatalf("status %d %s, want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
			if got := resp.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, tc.retryAfter)
			}
		})
	}
}

// TestFailedEndsMapToStatuses: a response the worker ends failed before its
// first chunk is a 500 engine_error, which the clients retry, unless the
// engine refused the request as it is: then a 400 invalid_request_error
// with the engine's message, which they do not; streaming or not.
func TestFailedEndsMapToStatuses(t *testing.T) {
	g := startGateway(t, nil)
	for _, tc := range []struct {
		steer, typ, code string
		status           int
	}{
		{"fail:engine died", "server_error", "engine_error", 500},
		{"refuse:engine answered 400: the prompt is over the context", "invalid_request_error", "engine_refused", 400},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.code, stream), func(t *testing.T) {
				extra := ""
				if stream {
					extra = `,"stream":true`
				}
				resp, body := g.post("/v1/chat/completions", "sk-a", chatBody(tc.steer, extra))
				e := decodeErr(t, body).Error
				_, why, _ := strings.Cut(tc.steer, ":")
				if resp.StatusCode != tc.status || e.Type != tc.typ || e.Code != tc.code || e.Message != why {
					t.Fatalf("status %d %s, want %d %s %s %q", resp.StatusCode, body, tc.status, tc.typ, tc.code, why)
				}
			})
		}
	}
}

func TestWholeResponses(t *testing.T) {
	g := startGateway(t, nil)
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("hello", ""), HeaderClass, "regular", HeaderDeadlineMs, "5000")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var cc struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &cc); err != nil || cc.Object != "chat.completion" || cc.Choices[0].Message.Content != "t0 t1 t2 " || cc.Usage.CompletionTokens != 3 {
		t.Fatalf("body %s (%v), want a chat.completion of three tokens", body, err)
	}
	if resp.Header.Get(HeaderRequestID) == "" {
		t.Fatal("no X-Request-Id")
	}
	h := g.resp.headers()[0]
	for k, want := range map[string]string{wire.HeaderFairnessKey: "tenant-a", wire.HeaderAPI: "chat.completions",
		wire.HeaderDeadlineMs: "5000", wire.HeaderISLTokens: "15"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s %q, want %q", k, got, want)
		}
	}
	resp, body = g.post("/v1/completions", "sk-b", `{"model":"m1","prompt":"hi","max_tokens":2}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"text_completion"`) || !strings.Contains(body, `"t0 t1 "`) {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	if got := g.resp.headers()[1].Get(wire.HeaderDeadlineMs); got != "" {
		t.Fatalf("tenant-b has no deadline, sent %q", got)
	}
}

// sse reads a streaming response's data lines until [DONE] or the end.
func sse(t *testing.T, r io.Reader) (data []string, done bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			if d == "[DONE]" {
				return data, true
			}
			data = append(data, d)
		}
	}
	return data, false
}

func TestStreaming(t *testing.T) {
	g := startGateway(t, nil)
	for _, tc := range []struct {
		name, path, body string
		usage            bool
	}{
		{"chat", "/v1/chat/completions", chatBody("hello", `,"stream":true`), false},
		{"chat with usage", "/v1/chat/completions", chatBody("hello", `,"stream":true,"stream_options":{"include_usage":true}`), true},
		{"completion", "/v1/completions", `{"model":"m1","prompt":"hi","max_tokens":3,"stream":true}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", g.url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer sk-a")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			data, done := sse(t, resp.Body)
			want := 3
			if tc.usage {
				want = 4
			}
			if !done || len(data) != want {
				t.Fatalf("%d data lines, [DONE] %v; want %d and [DONE]: %v", len(data), done, want, data)
			}
			if tc.usage != strings.Contains(data[len(data)-1], `"usage"`) {
				t.Fatalf("last chunk %s: usage chunk wanted %v", data[len(data)-1], tc.usage)
			}
		})
	}
	// The engine was always asked for the usage.
	for _, h := range g.resp.headers() {
		_ = h
	}
}

// A client that goes away cancels its request: the worker's next ping is
// answered cancel (or finds nobody), nothing is left held, and the tenant's
// slot is free again.
func TestClientGoneCancels(t *testing.T) {
	g := startGateway(t, nil)
	cancels := make(chan string, 10)
	sub, _ := g.nc.Subscribe("dispatch.cancel", func(m *nats.Msg) {
		c, _ := wire.ParseCancel(m.Data)
		cancels <- c.RequestID
	})
	defer sub.Unsubscribe()
	_ = g.nc.Flush()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/chat/completions", strings.NewReader(chatBody("hold", `,"stream":true`)))
	req.Header.Set("Authorization", "Bearer sk-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return g.resp.holding() == 1 }, "the request runs")
	id := resp.Header.Get(HeaderRequestID)
	cancel()
	resp.Body.Close()
	select {
	case got := <-cancels:
		if got != id {
			t.Fatalf("cancelled %q, want %q", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no cancellation published")
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return g.resp.holding() == 0 }, "the worker stops")
	natstest.Eventually(t, 5*time.Second, func() bool {
		for _, tn := range g.srv.keys {
			if tn.inflight.Load() != 0 {
				return false
			}
		}
		return true
	}, "no request in flight")
}

func TestConcurrencyLimit(t *testing.T) {
	g := startGateway(t, nil)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	for range 3 { // tenant-a's limit
		req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/chat/completions", strings.NewReader(chatBody("hold", `,"stream":true`)))
		req.Header.Set("Authorization", "Bearer sk-a")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	natstest.Eventually(t, 5*time.Second, func() bool { return g.resp.holding() == 3 }, "three requests run")
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("hi", ""))
	if resp.StatusCode != 429 || decodeErr(t, body).Error.Code != "concurrency_limit" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth request: %d %s, want 429 concurrency_limit with Retry-After", resp.StatusCode, body)
	}
	if resp, body := g.post("/v1/chat/completions", "sk-b", chatBody("hi", "")); resp.StatusCode != 200 {
		t.Fatalf("another tenant: %d %s", resp.StatusCode, body)
	}
}

// A retry with the same Idempotency-Key is one JetStream message: one after
// it ended hears nothing and gets 409. (A retry that attaches to a running
// response: caller's TestDuplicateAttachesBeforeTheFirstChunk.)
func TestIdempotencyKey(t *testing.T) {
	g := startGateway(t, nil)
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("hello", ""), HeaderIdempotency, "k1")
	if resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body = g.post("/v1/chat/completions", "sk-a", chatBody("hello", ""), HeaderIdempotency, "k1")
	if resp.StatusCode != 409 || decodeErr(t, body).Error.Code != "duplicate_request" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("retry after the end: %d %s, want 409 duplicate_request, X-Should-Retry: false", resp.StatusCode, body)
	}
	if n := len(g.resp.headers()); n != 1 {
		t.Fatalf("the request ran %d times, want once", n)
	}
	// Another tenant's same key is another request.
	if resp, body := g.post("/v1/chat/completions", "sk-b", chatBody("hello", ""), HeaderIdempotency, "k1"); resp.StatusCode != 200 {
		t.Fatalf("tenant-b with the same key: %d %s", resp.StatusCode, body)
	}
	// So is the same key on another body: it gets its own answer, not the
	// first request's or a 409.
	other := `{"model":"m1","max_tokens":5,"messages":[{"role":"user","content":"hello"}]}`
	resp, body = g.post("/v1/chat/completions", "sk-a", other, HeaderIdempotency, "k1")
	if resp.StatusCode != 200 || !strings.Contains(body, `"completion_tokens":5`) {
		t.Fatalf("the same key on another body: %d %s, want its own answer of 5 tokens", resp.StatusCode, body)
	}
	if n := len(g.resp.headers()); n != 3 {
		t.Fatalf("%d requests ran, want 3 (tenant-a's twice, tenant-b's once)", n)
	}
}

func TestModelsAndRoutes(t *testing.T) {
	g := startGateway(t, nil)
	req, _ := http.NewRequest("GET", g.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"m1"`) {
		t.Fatalf("models: %d %s", resp.StatusCode, b)
	}
	if resp, body := g.post("/v1/embeddings", "sk-a", `{}`); resp.StatusCode != 404 {
		t.Fatalf("unknown route: %d %s", resp.StatusCode, body)
	}
	// Retrieve one model (the clients' models.retrieve).
	for _, tc := range []struct {
		path, key string
		status    int
		want      string
	}{
		{"/v1/models/m1", "sk-b", 200, `{"id":"m1","object":"model"`},
		{"/v1/models/gpt-9", "sk-b", 404, `"code":"model_not_found"`},
		{"/v1/models/m1", "", 401, `"code":"invalid_api_key"`},
	} {
		req, _ := http.NewRequest("GET", g.url+tc.path, nil)
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s: %d %s, want %d with %s", tc.path, resp.StatusCode, b, tc.status, tc.want)
		}
	}
}

// NATS unreachable: the request is not accepted (503, Retry-After), and the
// gateway holds nothing for it.
func TestNATSUnreachable(t *testing.T) {
	srv, nc := natstest.StartServer(t)
	cfgText := strings.NewReplacer("%A%", HashKey("sk-a"), "%B%", HashKey("sk-b")).Replace(testConfig)
	cfg, err := ParseConfig("test.yaml", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	c, err := caller.New(nc, caller.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: cfg, Callers: map[string]*caller.Caller{"dispatch": c}, Registerer: prometheus.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	srv.Shutdown()
	natstest.Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "the client to see the server gone")
	g := &gw{t: t, url: hs.URL}
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("hi", ""))
	if resp.StatusCode != 503 || decodeErr(t, body).Error.Code != "not_accepted" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("with NATS down: %d %s, want 503 not_accepted with Retry-After", resp.StatusCode, body)
	}
	for _, tn := range s.keys {
		if tn.inflight.Load() != 0 {
			t.Fatalf("%s has %d in flight after the answer", tn.Name, tn.inflight.Load())
		}
	}
}

// TestMessageOverMaxPayload: a body under --max-body-bytes whose message is
// over the NATS server's max_payload (1 MiB here) is a 413 the clients do not
// retry, not a 503 that every retry meets again.
func TestMessageOverMaxPayload(t *testing.T) {
	g := startGateway(t, func(o *Options) { o.MaxBodyBytes = 2 << 20 })
	resp, body := g.post("/v1/completions", "sk-a", `{"model":"m1","prompt":"`+strings.Repeat("x", 1100<<10)+`"}`)
	if resp.StatusCode != 413 || decodeErr(t, body).Error.Code != "body_too_large" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("status %d, X-Should-Retry %q, %s; want 413 body_too_large, not to be retried", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
}

// TestKeyedRejectionIsNotRetried: a request with an Idempotency-Key that was
// stored and then rejected (queue_full) or failed is answered with its own
// status and X-Should-Retry: false, not Retry-After: the clients' retry with
// the same key would wait out the attach wait for a 409. Without a key the
// same rejection keeps its Retry-After.
func TestKeyedRejectionIsNotRetried(t *testing.T) {
	g := startGateway(t, nil)
	for _, c := range []struct {
		content string
		status  int
	}{{"reject:queue_full", 429}, {"fail:engine down", 500}} {
		resp, body := g.post("/v1/chat/completions", "sk-a", chatBody(c.content, ""), HeaderIdempotency, "key-"+c.content)
		if resp.StatusCode != c.status || resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Retry-After") != "" ||
			!strings.Contains(body, "retry with a new key") {
			t.Errorf("%s with a key: %d, X-Should-Retry %q, Retry-After %q, %s; want %d, not to be retried, naming a new key",
				c.content, resp.StatusCode, resp.Header.Get("X-Should-Retry"), resp.Header.Get("Retry-After"), body, c.status)
		}
	}
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("reject:queue_full", ""))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Should-Retry") != "" {
		t.Errorf("without a key: %d, Retry-After %q, X-Should-Retry %q, %s; want 429 with Retry-After 1",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"), body)
	}
}

// TestBrokenResponseIsRetryable: a non-streaming response that broke off
// (its worker sent a chunk and was not heard from again) is 502
// response_broken, which the clients retry: they saw none of it, and a new
// request runs anew. With an Idempotency-Key it is not to be retried (the
// same key would only get 409).
func TestBrokenResponseIsRetryable(t *testing.T) {
	g := startGateway(t, nil)
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("vanish", ""))
	if resp.StatusCode != 502 || decodeErr(t, body).Error.Code != "response_broken" || resp.Header.Get("X-Should-Retry") != "" {
		t.Errorf("broken: %d, X-Should-Retry %q, %s; want 502 response_broken, retryable", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
	resp, body = g.post("/v1/chat/completions", "sk-a", chatBody("vanish", ""), HeaderIdempotency, "key-vanish")
	if resp.StatusCode != 502 || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(body, "retry with a new key") {
		t.Errorf("broken with a key: %d, X-Should-Retry %q, %s; want 502, not to be retried, naming a new key", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
}

// TestCancelledIsNotRetried: a request cancelled before its first chunk (by
// an operator, another producer) is a 500 the clients do not retry: a retry
// would run again what was cancelled.
func TestCancelledIsNotRetried(t *testing.T) {
	g := startGateway(t, nil)
	resp, body := g.post("/v1/chat/completions", "sk-a", chatBody("cancelled", ""))
	if resp.StatusCode != 500 || decodeErr(t, body).Error.Code != "cancelled" || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("%d, X-Should-Retry %q, %s; want 500 cancelled, not to be retried", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
}

// TestNotAcceptedSaysWhatBecomesOfIt: a request JetStream did not confirm
// is answered 503 not_accepted with what the client can count on: not
// stored, cancelled (it will not run), kept for a retry with its key, or
// neither (its cancellation could not be sent: it may run).
func TestNotAcceptedSaysWhatBecomesOfIt(t *testing.T) {
	for _, c := range []struct {
		pe   caller.PublishError
		want string
	}{
		{caller.PublishError{Stored: caller.StoredNo}, "did not store it); retrying it is safe"},
		{caller.PublishError{Stored: caller.StoredUnknown, Cancelled: true}, "cancelled it): it will not run"},
		{caller.PublishError{Stored: caller.StoredUnknown, Kept: true}, "it may run; a retry with the same Idempotency-Key attaches"},
		{caller.PublishError{Stored: caller.StoredUnknown}, "could not be sent): it may still run"},
	} {
		c.pe.Err = errors.New("x")
		e := fromCall(&c.pe)
		if e.status != 503 || e.code != "not_accepted" || !strings.Contains(e.msg, c.want) {
			t.Errorf("%+v: %d %s %q, want 503 not_accepted saying %q", c.pe, e.status, e.code, e.msg, c.want)
		}
	}
}
