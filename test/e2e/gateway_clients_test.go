package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"fairdispatch/gateway"
)

// The official OpenAI clients, unmodified, through the gateway, the
// dispatcher and streaming mock workers on a real nats-server (issue 23,
// acceptance 1 and 4): openai-go (github.com/openai/openai-go/v3) in this
// process, the openai npm package (test/openai-node) as a child process.
// Each does a chat completion and a completion, streaming and not: every
// chunk in order (the mock's n-th token is words[(n-1) % 8]), the usage
// right, the stream ended by [DONE]; and each error status raises the
// client's matching error.

// mockWords are the mock worker's output tokens in order (mockworker/openai.go).
var mockWords = []string{" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit"}

func mockText(n int) string {
	var b strings.Builder
	for k := range n {
		b.WriteString(mockWords[k%len(mockWords)])
	}
	return b.String()
}

func clientsRig(t *testing.T) *gwRig {
	return startGatewayRig(t, gwOptions{policy: policy(t, "gateway-classes"), workers: 1,
		worker: mockworker0(), tenants: []gwTenant{
			{name: "acme", classes: "[premium, regular]"},
			{name: "solo", classes: "[regular]"},
		}})
}

func TestGatewayOpenAIGo(t *testing.T) {
	r := clientsRig(t)
	client := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey("sk-acme"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 6
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are brief."), openai.UserMessage("Say six words.")}

	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: gwModel, Messages: msgs, MaxTokens: openai.Int(n)})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Choices[0].Message.Content; got != mockText(n) || c.Usage.CompletionTokens != n || c.Usage.PromptTokens == 0 {
			t.Fatalf("content %q, usage %+v; want %q and %d completion tokens", got, c.Usage, mockText(n), n)
		}
	})
	t.Run("chat stream", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: gwModel, Messages: msgs, MaxTokens: openai.Int(n),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		var texts []string
		var usage int64
		for s.Next() {
			ch := s.Current()
			for _, c := range ch.Choices {
				if c.Delta.Content != "" {
					texts = append(texts, c.Delta.Content)
				}
			}
			if ch.Usage.CompletionTokens > 0 {
				usage = ch.Usage.CompletionTokens
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(texts, "") != mockText(n) || len(texts) != n || usage != n {
			t.Fatalf("chunks %q (%d), usage %d; want %d chunks of %q and usage %d", texts, len(texts), usage, n, mockText(n), n)
		}
	})
	t.Run("completion", func(t *testing.T) {
		c, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: gwModel,
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}, MaxTokens: openai.Int(n)})
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Text != mockText(n) || c.Usage.CompletionTokens != n {
			t.Fatalf("text %q, usage %+v", c.Choices[0].Text, c.Usage)
		}
	})
	t.Run("completion stream", func(t *testing.T) {
		s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: gwModel,
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}, MaxTokens: openai.Int(n)})
		var texts []string
		for s.Next() {
			for _, c := range s.Current().Choices {
				if c.Text != "" {
					texts = append(texts, c.Text)
				}
			}
			if s.Current().Usage.CompletionTokens > 0 {
				t.Errorf("a usage chunk the client did not ask for: %s", s.Current().RawJSON())
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(texts, "") != mockText(n) || len(texts) != n {
			t.Fatalf("chunks %q", texts)
		}
	})
	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != gwModel {
			t.Fatalf("models %+v, %v", page, err)
		}
	})
	// The raw stream ends with data: [DONE].
	t.Run("[DONE]", func(t *testing.T) {
		req, _ := http.NewRequest("POST", r.url+"/v1/completions", strings.NewReader(`{"model":"`+gwModel+`","prompt":"x","max_tokens":3,"stream":true}`))
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) != 4 || lines[3] != "data: [DONE]" {
			t.Fatalf("stream lines %q, want three chunks and data: [DONE]", lines)
		}
	})
	// Errors raise *openai.Error with the status and the code.
	for _, tc := range []struct {
		name   string
		key    string
		opts   []option.RequestOption
		model  string
		max    int64
		status int
		code   string
	}{
		{"401", "sk-acmf", nil, gwModel, 2, 401, "invalid_api_key"},
		{"403", "sk-solo", []option.RequestOption{option.WithHeader(gateway.HeaderClass, "premium")}, gwModel, 2, 403, "class_not_allowed"},
		{"404", "sk-acme", nil, "gpt-nope", 2, 404, "model_not_found"},
		{"400", "sk-acme", nil, gwModel, 1_000_000_000_000, 400, "max_tokens_too_large"},
	} {
		t.Run("error "+tc.name, func(t *testing.T) {
			c := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(tc.key), option.WithMaxRetries(0))
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: tc.model, Messages: msgs, MaxTokens: openai.Int(tc.max)}, tc.opts...)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || apiErr.Code != tc.code {
				t.Fatalf("error %v, want *openai.Error %d %s", err, tc.status, tc.code)
			}
		})
	}
}

// nodeResult is one line of test/openai-node/client.js.
type nodeResult struct {
	Name   string   `json:"name"`
	OK     bool     `json:"ok"`
	Texts  []string `json:"texts"`
	Chunks int      `json:"chunks"` // of a stream
	Usage  *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	UsageChunk *int   `json:"usage_chunk"` // the index of the stream's chunk with the usage
	Finish     string `json:"finish"`
	Error      *struct {
		Class  string `json:"class"`
		Status int    `json:"status"`
		Code   string `json:"code"`
	} `json:"error"`
}

const nodeClientDir = "../openai-node"

// runNodeClient runs client.js with plan, every call at once, and returns
// its results by name. Without node or its node_modules it skips, or fails
// under CI=true.
func runNodeClient(t *testing.T, url string, plan []map[string]any) map[string]nodeResult {
	t.Helper()
	return runNodeClientN(t, url, 0, plan)
}

// runNodeClientN is runNodeClient with at most concurrency calls in flight
// (0: no bound) in one Node process; the plan goes on its stdin.
func runNodeClientN(t *testing.T, url string, concurrency int, plan []map[string]any) map[string]nodeResult {
	t.Helper()
	node := nodeFor(t, nodeClientDir, "test/openai-node", "openai", "the openai npm client")
	b, _ := json.Marshal(plan)
	cmd := exec.Command(node, "client.js")
	cmd.Dir = nodeClientDir
	cmd.Env = append(os.Environ(), "GATEWAY_URL="+url+"/v1", "CONCURRENCY="+strconv.Itoa(concurrency))
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("client.js: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	res := map[string]nodeResult{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r nodeResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("client.js printed %q: %v", line, err)
		}
		res[r.Name] = r
	}
	return res
}

func TestGatewayOpenAINode(t *testing.T) {
	r := clientsRig(t)
	const n = 5
	call := func(name, kind string, stream, usage bool, extra map[string]any) map[string]any {
		c := map[string]any{"name": name, "kind": kind, "stream": stream, "include_usage": usage, "key": "sk-acme",
			"model": gwModel, "max_tokens": n, "content": "Say five words."}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	res := runNodeClient(t, r.url, []map[string]any{
		call("chat", "chat", false, false, nil),
		call("chat stream", "chat", true, true, nil),
		call("completion", "completion", false, false, nil),
		call("completion stream", "completion", true, false, nil),
		call("401", "chat", false, false, map[string]any{"key": "sk-acm"}),
		call("403", "chat", false, false, map[string]any{"key": "sk-solo", "headers": map[string]string{gateway.HeaderClass: "premium"}}),
		call("404", "chat", false, false, map[string]any{"model": "gpt-nope"}),
		call("400", "completion", false, false, map[string]any{"max_tokens": 1_000_000_000_000}),
	})
	for _, name := range []string{"chat", "chat stream", "completion", "completion stream"} {
		got := res[name]
		wantChunks := 1
		if strings.HasSuffix(name, "stream") {
			wantChunks = n
		}
		if !got.OK || strings.Join(got.Texts, "") != mockText(n) || len(got.Texts) != wantChunks || got.Finish == "" {
			t.Errorf("%s: %+v; want %d chunks of %q and a finish reason", name, got, wantChunks, mockText(n))
		}
		wantUsage := name != "completion stream" // asked for, or in a whole response
		if (got.Usage != nil && got.Usage.CompletionTokens == n) != wantUsage {
			t.Errorf("%s: usage %+v, want one with %d completion tokens: %v", name, got.Usage, n, wantUsage)
		}
	}
	for name, want := range map[string]struct {
		class  string
		status int
		code   string
	}{
		"401": {"AuthenticationError", 401, "invalid_api_key"},
		"403": {"PermissionDeniedError", 403, "class_not_allowed"},
		"404": {"NotFoundError", 404, "model_not_found"},
		"400": {"BadRequestError", 400, "max_tokens_too_large"},
	} {
		got := res[name]
		if got.Error == nil || got.Error.Class != want.class || got.Error.Status != want.status || got.Error.Code != want.code {
			t.Errorf("%s: %+v, want %s %d %s", name, got.Error, want.class, want.status, want.code)
		}
	}
}
