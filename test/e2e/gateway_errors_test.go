package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"fairdispatch/gateway"
	"fairdispatch/mockworker"
)

// Every error the gateway maps (docs/config.md, Gateway: errors), produced by
// the real dispatcher and raised by the official npm client as its matching
// class (issue 23, acceptance 4); openai-go sees the same statuses. One
// worker runs one request at a time; a blocker holds it while the
// rejections are provoked:
//   - queue_full: class tiny queues one request; its second gets 429;
//   - expired: a request in class deep with a 200 ms deadline gets 504;
//   - all_workers_overloaded: class nowait does not queue: 503;
//   - concurrency_limit: tenant one may have one request in flight: 429;
//   - body_too_large: 413; duplicate_request (the same Idempotency-Key
//     after the request ended): 409;
//   - no_endpoints: the worker stopped, --no-workers-timeout ran out: 503;
//   - dispatcher_unreachable: the dispatcher killed: 503.

func TestGatewayErrorsWithTheClients(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	r := startGatewayRig(t, gwOptions{policy: policy(t, "gateway-errors"), workers: 1,
		dispArgs: []string{"--no-workers-timeout", "1s"},
		worker:   mockworker.Config{MaxNumSeqs: 1, MaxActiveRequests: 1, DecodePerToken: 50 * time.Millisecond, TTL: time.Second},
		tenants: []gwTenant{
			{name: "acme", classes: "[deep, tiny, nowait]"},
			{name: "one", classes: "[deep]", extra: "max_concurrent: 1"},
		},
		mod: func(o *gateway.Options) { o.MaxBodyBytes = 64 << 10 }})

	// Hold the only slot: a stream of 400 tokens (20 s), and queue tiny's one.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := func(key, class string) {
		body := `{"model":"` + gwModel + `","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"hold"}]}`
		req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(gateway.HeaderClass, class)
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	// A request that ran, for the duplicate below: the same key and the same
	// request (the body the Node client sends for the plan's "duplicate").
	if resp, body := r.post("/v1/completions", "sk-acme", `{"model":"`+gwModel+`","prompt":"x","max_tokens":2}`, gateway.HeaderIdempotency, "once"); resp.StatusCode != 200 {
		t.Fatalf("the request to repeat: %d %s", resp.StatusCode, body)
	}
	hold("sk-one", "deep")
	waitFor(t, 10*time.Second, "the blocker runs", func() bool { return r.disp.metric("fairdispatch_dispatched_total") >= 2 })
	hold("sk-acme", "tiny")
	waitFor(t, 10*time.Second, "tiny's one request queued", func() bool {
		v, ok := r.disp.queues()
		return ok && v.pendingTotal() == 1
	})
	type want struct {
		class, code string
		status      int
		retryAfter  bool
	}
	plan := []map[string]any{}
	wants := map[string]want{}
	add := func(name string, c map[string]any, w want) {
		base := map[string]any{"name": name, "kind": "completion", "key": "sk-acme", "model": gwModel, "max_tokens": 2, "content": "x"}
		for k, v := range c {
			base[k] = v
		}
		plan = append(plan, base)
		wants[name] = w
	}
	add("queue_full", map[string]any{"headers": map[string]string{gateway.HeaderClass: "tiny"}}, want{"RateLimitError", "queue_full", 429, true})
	add("expired", map[string]any{"headers": map[string]string{gateway.HeaderClass: "deep", gateway.HeaderDeadlineMs: "200"}}, want{"InternalServerError", "expired", 504, false})
	add("overloaded", map[string]any{"headers": map[string]string{gateway.HeaderClass: "nowait"}}, want{"InternalServerError", "all_workers_overloaded", 503, true})
	add("concurrency", map[string]any{"key": "sk-one"}, want{"RateLimitError", "concurrency_limit", 429, true})
	add("too large", map[string]any{"content": strings.Repeat("y", 1024), "repeat": 100}, want{"APIError", "body_too_large", 413, false})
	add("duplicate", map[string]any{"idempotency_key": "once"}, want{"ConflictError", "duplicate_request", 409, false})
	check := func(res map[string]nodeResult, wants map[string]want) {
		t.Helper()
		for name, w := range wants {
			got := res[name].Error
			if got == nil || got.Class != w.class || got.Status != w.status || got.Code != w.code {
				t.Errorf("%s: %+v, want %s %d %s", name, got, w.class, w.status, w.code)
			}
		}
	}
	check(runNodeClient(t, r.url, plan), wants)

	// openai-go raises *openai.Error with the same status.
	client := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey("sk-acme"), option.WithMaxRetries(0))
	_, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: gwModel, MaxTokens: openai.Int(1),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}}, option.WithHeader(gateway.HeaderClass, "tiny"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "queue_full" || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Errorf("openai-go: %v, want a 429 queue_full with Retry-After", err)
	}
	cancel() // the blocker and tiny's request go; their clients are gone

	// No live worker: the dispatcher fails what it holds once the outage
	// lasted --no-workers-timeout (docs/design.md, Fleet outage); a request
	// that arrives later waits in the stream (its deadline applies).
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ctx = ctx2
	before := r.disp.metric("fairdispatch_dispatched_total")
	hold("sk-one", "deep")
	waitFor(t, 10*time.Second, "the slot held again", func() bool { return r.disp.metric("fairdispatch_dispatched_total") > before })
	noWorker := make(chan map[string]nodeResult, 1)
	go func() {
		noWorker <- runNodeClient(t, r.url, []map[string]any{{"name": "no worker", "kind": "chat", "key": "sk-acme", "model": gwModel, "max_tokens": 2, "content": "x"}})
	}()
	waitFor(t, 10*time.Second, "a request queued behind it", func() bool {
		v, ok := r.disp.queues()
		return ok && v.pendingTotal() == 1
	})
	r.stopWorkers()
	check(<-noWorker, map[string]want{"no worker": {"InternalServerError", "no_endpoints", 503, true}})
	cancel2()

	// The dispatcher gone: its lease lapses, the gateway refuses at once.
	r.disp.signal(syscall.SIGKILL)
	waitFor(t, 20*time.Second, "the gateway to refuse for want of a dispatcher", func() bool {
		code, body := r.postWithin(2*time.Second, "/v1/completions", "sk-acme", `{"model":"`+gwModel+`","prompt":"x","max_tokens":1}`)
		return code == 503 && strings.Contains(body, "dispatcher_unreachable")
	})
	check(runNodeClient(t, r.url, []map[string]any{{"name": "no dispatcher", "kind": "chat", "key": "sk-acme", "model": gwModel, "max_tokens": 2, "content": "x"}}),
		map[string]want{"no dispatcher": {"InternalServerError", "dispatcher_unreachable", 503, true}})
}
