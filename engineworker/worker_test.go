package engineworker

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

const wait = 20 * time.Second

// rig is a fake engine, an engine worker "eng" in front of it on an
// embedded NATS server, and recorders of the worker's load reports and
// completion records.
type rig struct {
	t  *testing.T
	nc *nats.Conn
	e  *fakeengine.Engine
	w  *Worker

	mu      sync.Mutex
	report  wire.LoadReport
	reports int
	records map[string]wire.Completion
	stop    context.CancelFunc
	done    chan error
}

func newRig(t *testing.T, ecfg fakeengine.Config, cfg Config) *rig {
	t.Helper()
	return newRigLogging(t, ecfg, cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
}

// newRigLogging is newRig with the worker's logger.
func newRigLogging(t *testing.T, ecfg fakeengine.Config, cfg Config, log zerolog.Logger) *rig {
	t.Helper()
	_, nc := natstest.StartServer(t)
	e, url := startFake(t, ecfg)
	cfg.Worker.ID, cfg.EngineURL = "eng", url
	if cfg.Engine == "" {
		cfg.Engine = ecfg.Kind
		if cfg.Engine == "" {
			cfg.Engine = "vllm"
		}
	}
	if cfg.Engine == "vllm" && cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = uint64(e.Config().MaxNumSeqs)
	}
	// A short interval so that a hang is noticed soon, and a timeout long
	// enough that only a hung engine fails two checks in a row (a loaded
	// machine does not): a hang is then reported within HealthPeriod, ~4 s.
	if cfg.HealthInterval == 0 && cfg.Engine == "vllm" {
		cfg.HealthInterval, cfg.HealthTimeout = 50*time.Millisecond, 2*time.Second
	} // SGLang's /health takes a second: its defaults are made for that
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = 50 * time.Millisecond
	}
	k := &rig{t: t, nc: nc, e: e, records: map[string]wire.Completion{}, done: make(chan error, 1)}
	if _, err := nc.Subscribe("dispatch.load.eng", func(m *nats.Msg) {
		var r wire.LoadReport
		if json.Unmarshal(m.Data, &r) == nil {
			k.mu.Lock()
			k.report, k.reports = r, k.reports+1
			k.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("dispatch.done.eng", func(m *nats.Msg) {
		var c wire.Completion
		if json.Unmarshal(m.Data, &c) == nil {
			k.mu.Lock()
			k.records[c.RequestID] = c
			k.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	w, err := New(nc, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	k.w = w
	ctx, cancel := context.WithCancel(context.Background())
	k.stop = cancel
	go func() { k.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		e.Hang(false)
		cancel()
		select {
		case <-k.done:
		case <-time.After(wait):
			t.Error("Run did not return")
		}
	})
	select {
	case <-w.Ready():
	case err := <-k.done:
		t.Fatalf("Run: %v", err)
	case <-time.After(wait):
		t.Fatal("the worker never got ready")
	}
	return k
}

// lastReport returns the last load report and how many came.
func (k *rig) lastReport() (wire.LoadReport, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.report, k.reports
}

func (k *rig) record(id string) (wire.Completion, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.records[id]
	return c, ok
}

// dispatch sends request id to the worker as the dispatcher does, with its
// acknowledgements on ack.<id>; respondTo "" asks for no response. It
// returns the worker's answer's Dispatch-Status ("" accepted).
func (k *rig) dispatch(id string, seq uint64, respondTo, api string, body []byte) string {
	k.t.Helper()
	m := nats.NewMsg("dispatch.work.eng")
	m.Header.Set(wire.HeaderRequestID, id)
	m.Header.Set(wire.HeaderClass, "default")
	m.Header.Set(wire.HeaderSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(wire.HeaderCost, "100")
	m.Header.Set(wire.HeaderAck, "ack."+id)
	m.Header.Set(wire.HeaderFairnessKey, "tenant")
	if respondTo != "" {
		m.Header.Set(wire.HeaderResponseTo, respondTo)
	}
	if api != "" {
		m.Header.Set(wire.HeaderAPI, api)
	}
	m.Data = body
	resp, err := k.nc.RequestMsg(m, wait)
	if err != nil {
		k.t.Fatalf("dispatch %s: %v", id, err)
	}
	return resp.Header.Get(wire.HeaderStatus)
}

// producer plays the producer of docs/protocol.md, Responses on subject:
// it keeps every message and answers go to the claim, ok to the rest.
func (k *rig) producer(subject string) *natstest.Producer {
	k.t.Helper()
	return natstest.NewProducer(k.t, k.nc, subject, natstest.GoOK)
}

// endMarker returns p's end marker, once it came.
func endMarker(p *natstest.Producer) (wire.ResponseEnd, bool) {
	ends := p.Of(wire.MsgEnd)
	if len(ends) == 0 {
		return wire.ResponseEnd{}, false
	}
	var e wire.ResponseEnd
	_ = json.Unmarshal(ends[0].Data, &e)
	return e, true
}

// acks records what the worker sends to ack.<id> and confirms requests.
func (k *rig) acks(id string) *natstest.Acks {
	k.t.Helper()
	return natstest.WatchAcks(k.t, k.nc, "ack."+id)
}

// TestSGLangSettingsFromServerInfo: without --max-num-seqs an SGLang
// worker reads its capacity, max_num_batched_tokens and KV capacity from
// /get_server_info; with the health defaults of SGLang, whose /health takes
// a second (the fake engine's default for SGLang), it starts.
func TestSGLangSettingsFromServerInfo(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{Kind: "sglang", MaxNumSeqs: 5, MaxNumBatchedTokens: 4096, NumGPUBlocks: 300, BlockSize: 1}, Config{})
	natstest.Eventually(t, wait, func() bool { _, n := k.lastReport(); return n > 0 }, "a load report")
	r, _ := k.lastReport()
	if r.MaxActive == nil || *r.MaxActive != 5 || r.MaxBatched == nil || *r.MaxBatched != 4096 || r.TotalKV != 300/16 {
		t.Fatalf("report %+v: want max_active_requests 5, max_num_batched_tokens 4096, total_kv_blocks %d", r, 300/16)
	}
	if _, err := New(k.nc, Config{Engine: "vllm", EngineURL: "http://127.0.0.1:1", Worker: k.w.cfg.Worker}, zerolog.Nop()); err == nil {
		t.Fatal("a vLLM worker without max_num_seqs was built")
	}
}

// TestLoadFollowsTheMetrics: requests the engine runs for another client
// count in active_requests, and kv_used_blocks is the engine's usage times
// vllm:cache_config_info's num_gpu_blocks; both come back to 0.
func TestLoadFollowsTheMetrics(t *testing.T) {
	t.Parallel()
	k := newRig(t, fakeengine.Config{NumGPUBlocks: 40, DecodePerToken: 5 * time.Millisecond}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the engine's server closes, which waits for its requests
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(`{"model":"fake-model","prompt":"` + string(rune('a'+i)) + ` 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16","max_tokens":100000}`)
			_, _ = Call(ctx, k.w.http, k.w.cfg.EngineURL, "completions", body, -1, func([]byte, bool) error { return nil })
		}()
	}
	want := func(active, kv uint64) func() bool {
		return func() bool {
			r, _ := k.lastReport()
			return len(r.Ranks) == 1 && r.Ranks[0].ActiveRequests == active && r.Ranks[0].KVUsedBlocks == kv && r.TotalKV == 40
		}
	}
	// Two prompts of 18 tokens: two blocks each of 40: usage 0.1, 4 blocks.
	natstest.Eventually(t, wait, want(2, 4), "the engine's two requests and four blocks in the report")
	cancel()
	wg.Wait()
	natstest.Eventually(t, wait, want(0, 0), "the load back to zero (the blocks are free: kv_cache_usage_perc counts running requests' blocks)")
}

// TestLogLinesHaveEachKeyOnce: the worker's JSON log lines, its helper's
// included, carry each key once (a line with "component" twice is one some
// parsers refuse, and jq reads only the last).
func TestLogLinesHaveEachKeyOnce(t *testing.T) {
	logs := &natstest.Buffer{}
	newRigLogging(t, fakeengine.Config{}, Config{}, zerolog.New(logs))
	natstest.Eventually(t, wait, func() bool { return strings.Contains(logs.String(), "worker started") }, "the helper's start logged")
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		seen := map[string]bool{}
		if _, err := dec.Token(); err != nil { // {
			t.Fatalf("%q: %v", line, err)
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if seen[k.(string)] {
				t.Errorf("key %q twice in %s", k, line)
			}
			seen[k.(string)] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
}
