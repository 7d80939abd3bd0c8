package fakeengine_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/openai"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func start(t *testing.T, cfg fakeengine.Config) (*fakeengine.Engine, *httptest.Server) {
	t.Helper()
	e, err := fakeengine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() { srv.Close(); e.Close() })
	return e, srv
}

const chatBody = `{"model":"fake-model","messages":[{"role":"system","content":"you are a helpful assistant who answers in short sentences only please"},{"role":"user","content":"hello there"}],"max_tokens":3`

func TestChatStreamsWithUsage(t *testing.T) {
	_, srv := start(t, fakeengine.Config{BlockSize: 4, PromptTokensDetails: true})
	post := func(body string) *http.Response {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var first struct{ Usage openai.Usage }
	resp := post(chatBody + "}")
	if err := json.NewDecoder(resp.Body).Decode(&first); err != nil || first.Usage.CompletionTokens != 3 || first.Usage.PromptTokensDetails != nil {
		t.Fatalf("first: %+v %v (want 3 tokens, no cached details)", first, err)
	}
	resp.Body.Close()
	resp = post(chatBody + `,"stream":true,"stream_options":{"include_usage":true}}`)
	defer resp.Body.Close()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	// role chunk, 3 tokens, the usage chunk, [DONE]
	if len(lines) != 6 || lines[5] != "data: [DONE]" {
		t.Fatalf("got %d lines: %q", len(lines), lines)
	}
	var last struct {
		Choices []any
		Usage   openai.Usage
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[4], "data: ")), &last); err != nil {
		t.Fatal(err)
	}
	if len(last.Choices) != 0 || last.Usage.PromptTokensDetails == nil || last.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatalf("usage chunk: %+v (want no choices and cached tokens)", last)
	}
}

func TestMetricsNames(t *testing.T) {
	for kind, names := range map[string][]string{
		"vllm":   {"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{", "vllm:cache_config_info{", "vllm:prefix_cache_hits_total{"},
		"sglang": {"sglang:num_running_reqs{", "sglang:num_queue_reqs{", "sglang:token_usage{", "sglang:cache_hit_rate{"},
	} {
		_, srv := start(t, fakeengine.Config{Kind: kind})
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		resp.Body.Close()
		for _, n := range names {
			if !strings.Contains(b.String(), n) {
				t.Errorf("%s: no %s in\n%s", kind, n, b.String())
			}
		}
	}
}

func TestHangAcceptsButNeverAnswers(t *testing.T) {
	e, srv := start(t, fakeengine.Config{})
	e.Hang(true)
	// A short timeout for the hung engine: a slow machine only makes this
	// check pass without testing; a long one for the answer after the hang.
	short := http.Client{Timeout: 200 * time.Millisecond}
	if _, err := short.Get(srv.URL + "/health"); err == nil {
		t.Fatal("a hung engine answered /health")
	}
	e.Hang(false)
	long := http.Client{Timeout: 20 * time.Second}
	resp, err := long.Get(srv.URL + "/health")
	if err != nil {
		t.Fatalf("after the hang: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the hang: status %d", resp.StatusCode)
	}
}

// Every layout the fake publishes decodes with the engine worker's decoder,
// live and through the replay socket (both replay forms).
func TestEventsEveryLayoutAndReplay(t *testing.T) {
	for i, layout := range fakeengine.Layouts {
		pub, rep := freePort(t), freePort(t)
		e, srv := start(t, fakeengine.Config{BlockSize: 4, Layout: layout, DPRank: 1, ByteHashes: i%2 == 1, ReplayWithTopic: i%2 == 0,
			KVEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(pub), ReplayEndpoint: "tcp://127.0.0.1:" + strconv.Itoa(rep), Topic: "kv"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // beyond the 20 s for a message
		sub := zmq4.NewSub(ctx)
		if err := sub.Dial("tcp://127.0.0.1:" + strconv.Itoa(pub)); err != nil {
			t.Fatal(err)
		}
		_ = sub.SetOption(zmq4.OptionSubscribe, "kv")
		var got []engineworker.Batch
		deadline := time.Now().Add(20 * time.Second)
		done := make(chan zmq4.Msg, 1)
		go func() {
			m, err := sub.Recv()
			if err == nil {
				done <- m
			}
		}()
		var m zmq4.Msg
	wait: // PUB drops messages sent before the subscription reaches it: post until one arrives
		for time.Now().Before(deadline) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody+"}"))
			if err == nil {
				resp.Body.Close()
			}
			e.Restart(false) // empty cache: the next request stores again
			select {
			case m = <-done:
				break wait
			case <-time.After(50 * time.Millisecond):
			}
		}
		if len(m.Frames) != 3 || string(m.Frames[0]) != "kv" || len(m.Frames[1]) != 8 {
			t.Fatalf("%s: frames %q", layout, m.Frames)
		}
		b, err := engineworker.DecodeBatch(m.Frames[2])
		if err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		got = append(got, b)
		if got[0].Events[0].Kind != engineworker.BlockStored || len(got[0].Events[0].Tokens) == 0 {
			t.Errorf("%s: first event %+v", layout, got[0].Events[0])
		}
		if layout != fakeengine.LayoutV1 && got[0].Rank != 1 {
			t.Errorf("%s: rank %d, want 1", layout, got[0].Rank)
		}
		// Replay from 0: the fake restarted, so its buffer holds what came after.
		dl := zmq4.NewDealer(ctx)
		if err := dl.Dial("tcp://127.0.0.1:" + strconv.Itoa(rep)); err != nil {
			t.Fatal(err)
		}
		var s [8]byte
		binary.BigEndian.PutUint64(s[:], 0)
		if err := dl.SendMulti(zmq4.NewMsgFrom(nil, s[:])); err != nil {
			t.Fatal(err)
		}
		r, err := dl.Recv()
		if err != nil {
			t.Fatal(err)
		}
		frames := r.Frames[1:] // the empty delimiter
		if i%2 == 0 {
			frames = frames[1:] // the topic
		}
		if len(frames) != 2 || len(frames[0]) != 8 {
			t.Fatalf("%s: replay frames %q", layout, r.Frames)
		}
		sub.Close()
		dl.Close()
		cancel()
	}
}

// TestDefaultConfigIsWhatNewApplies: cmd/fakeengine's flags take their
// defaults from DefaultConfig, so it must be what New gives a zero Config,
// with every documented default set.
func TestDefaultConfigIsWhatNewApplies(t *testing.T) {
	e, err := fakeengine.New(context.Background(), fakeengine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	def := fakeengine.DefaultConfig()
	if got := e.Config(); got.Kind != def.Kind || got.Model != def.Model || got.BlockSize != def.BlockSize ||
		got.NumGPUBlocks != def.NumGPUBlocks || got.MaxNumSeqs != def.MaxNumSeqs ||
		got.MaxNumBatchedTokens != def.MaxNumBatchedTokens || got.PrefillTokensPerSec != def.PrefillTokensPerSec ||
		got.DecodePerToken != def.DecodePerToken || got.Layout != def.Layout || got.ReplayBuffer != def.ReplayBuffer {
		t.Fatalf("New's config %+v, DefaultConfig %+v", got, def)
	}
	if def.Kind != "vllm" || def.BlockSize != 16 || def.NumGPUBlocks != 4096 || def.MaxNumSeqs != 8 || def.DecodePerToken != time.Millisecond {
		t.Errorf("DefaultConfig %+v: not the documented defaults", def)
	}
}
