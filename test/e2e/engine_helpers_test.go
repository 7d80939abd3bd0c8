package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/wire"
)

// The engine tests' rig (issue 24): fake engines, each behind an engine
// worker, and a Go producer on the response path (docs/protocol.md,
// Responses) standing for the gateway.

// fleetEngine is one fake engine on a fixed HTTP address and ZMQ ports
// (so that it can be killed and started again as a new process) and the
// engine worker in front of it.
type fleetEngine struct {
	t        *testing.T
	id       string
	cfg      fakeengine.Config
	addr     string
	e        *fakeengine.Engine
	srv      *http.Server
	served   chan struct{}
	w        *engineworker.Worker
	wcfg     engineworker.Config
	stopWork context.CancelFunc
	workDone chan struct{}
}

// startFleet starts n fake engines with cfg, each behind an engine worker
// eng1, eng2, ... with wcfg (its Worker.ID, engine URL and endpoints set
// here), and waits until every worker is ready.
func startFleet(t *testing.T, nc *nats.Conn, n int, cfg fakeengine.Config, wcfg engineworker.Config) []*fleetEngine {
	t.Helper()
	var out []*fleetEngine
	for i := range n {
		c := cfg
		c.KVEndpoint, c.ReplayEndpoint = "tcp://"+freeAddr(t), "tcp://"+freeAddr(t)
		fe := &fleetEngine{t: t, id: fmt.Sprint("eng", i+1), cfg: c, addr: freeAddr(t)}
		fe.startEngine()
		t.Cleanup(fe.killEngine)
		wc := wcfg
		wc.Worker.ID, wc.Engine, wc.EngineURL = fe.id, "vllm", "http://"+fe.addr
		if wc.MaxNumSeqs == 0 {
			wc.MaxNumSeqs = uint64(fe.e.Config().MaxNumSeqs)
		}
		wc.KVEndpoint, wc.ReplayEndpoint = c.KVEndpoint, c.ReplayEndpoint
		fe.wcfg = wc
		fe.startWorker(nc)
		out = append(out, fe)
	}
	for _, fe := range out {
		select {
		case <-fe.w.Ready():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never got ready", fe.id)
		}
	}
	return out
}

// startEngine starts a new engine process, as it were: an empty cache, its
// event sequence from 0.
func (fe *fleetEngine) startEngine() {
	fe.t.Helper()
	e, err := fakeengine.New(context.Background(), fe.cfg)
	if err != nil {
		fe.t.Fatal(err)
	}
	var ln net.Listener
	for range 50 { // the old process's port may take a moment to free
		if ln, err = net.Listen("tcp", fe.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		fe.t.Fatal(err)
	}
	fe.e, fe.srv, fe.served = e, &http.Server{Handler: e.Handler()}, make(chan struct{})
	go func(srv *http.Server, done chan struct{}) { defer close(done); _ = srv.Serve(ln) }(fe.srv, fe.served)
}

// killEngine stops the engine process: its connections close, its ports too.
func (fe *fleetEngine) killEngine() {
	if fe.srv == nil {
		return
	}
	fe.e.Hang(false)
	_ = fe.srv.Close()
	<-fe.served
	fe.e.Close()
	fe.srv = nil
}

func (fe *fleetEngine) startWorker(nc *nats.Conn) {
	fe.t.Helper()
	w, err := engineworker.New(nc, fe.wcfg, zerolog.New(zerolog.NewTestWriter(fe.t)).Level(zerolog.WarnLevel))
	if err != nil {
		fe.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fe.w, fe.stopWork, fe.workDone = w, cancel, make(chan struct{})
	go func(done chan struct{}) { defer close(done); _ = w.Run(ctx) }(fe.workDone)
	fe.t.Cleanup(func() { cancel(); <-fe.workDone })
}

// view returns the dispatcher's view of worker id's rank 0, and whether it is live.
func workerView(p *proc, id string) (wire.WorkerView, bool) {
	v, ok := p.queues()
	if w := v.worker(id); ok && w != nil && len(w.Ranks) > 0 {
		return *w, true
	}
	return wire.WorkerView{}, false
}

// respCaller is a producer on the response path: it publishes requests
// asking for a response and follows each (docs/protocol.md, What the
// producer answers).
type respCaller struct {
	t    *testing.T
	nc   *nats.Conn
	js   jetstream.JetStream
	resp string // the response subjects' prefix: a call's subject is this and its id

	mu    sync.Mutex
	calls map[string]*respCall
}

// respCall is one request as its producer sees it.
type respCall struct {
	id      string
	sub     *nats.Subscription
	started time.Time

	mu       sync.Mutex
	exec     string   // the chosen execution
	chunks   [][]byte // of the chosen execution, in order
	claims   int
	execs    map[string]bool
	end      *wire.ResponseEnd
	ended    time.Time
	broken   string // why the stream is broken (a gap, chunks out of order)
	outcomes []wire.Outcome
	done     chan struct{}
}

func newRespCaller(t *testing.T, nc *nats.Conn) *respCaller {
	return &respCaller{t: t, nc: nc, js: jsOf(t, nc), resp: "_RESP.e2e.", calls: map[string]*respCall{}}
}

// start subscribes to the response subject of id and publishes the
// request to class with the headers h (Dispatch-Response-To and
// Dispatch-Reply-To are set here) and body.
func (c *respCaller) start(id, class string, h nats.Header, body []byte) *respCall {
	c.t.Helper()
	call := &respCall{id: id, execs: map[string]bool{}, done: make(chan struct{}), started: time.Now()}
	subject := c.resp + id
	sub, err := c.nc.Subscribe(subject, call.onMsg)
	if err != nil {
		c.t.Fatal(err)
	}
	call.sub = sub
	m := nats.NewMsg("dispatch.req." + class)
	for k, v := range h {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(wire.HeaderResponseTo, subject)
	m.Header.Set(wire.HeaderReplyTo, subject)
	m.Data = body
	if _, err := c.js.PublishMsg(context.Background(), m); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.calls[id] = call
	c.mu.Unlock()
	return call
}

func (r *respCall) onMsg(m *nats.Msg) {
	kind := m.Header.Get(wire.HeaderResponse)
	exec := m.Header.Get(wire.HeaderExecution)
	seq, _ := strconv.Atoi(m.Header.Get(wire.HeaderResponseSeq))
	r.mu.Lock()
	over := r.end != nil || r.broken != ""
	answer := ""
	switch kind {
	case "": // an outcome
		var o wire.Outcome
		if json.Unmarshal(m.Data, &o) == nil {
			r.outcomes = append(r.outcomes, o)
			if o.Status == "rejected" && r.end == nil {
				r.end = &wire.ResponseEnd{Status: "rejected", Error: o.Error}
				r.ended = time.Now()
				close(r.done)
			}
		}
	case wire.MsgClaim:
		r.claims++
		r.execs[exec] = true
		switch {
		case over:
			answer = wire.AnswerCancel
		case len(r.chunks) == 0 || exec == r.exec:
			r.exec, answer = exec, wire.AnswerGo
		default:
			answer = wire.AnswerTaken
		}
	case wire.MsgPing:
		switch {
		case exec != r.exec:
			answer = wire.AnswerTaken
		case over:
			answer = wire.AnswerCancel
		default:
			answer = wire.AnswerOK
		}
	case wire.MsgChunk:
		if exec == r.exec && !over {
			if seq != len(r.chunks)+1 {
				r.broken = fmt.Sprintf("chunk %d after %d", seq, len(r.chunks))
				close(r.done)
			} else {
				r.chunks = append(r.chunks, m.Data)
			}
		}
	case wire.MsgEnd:
		answer = wire.AnswerOK
		if exec == r.exec && !over {
			var e wire.ResponseEnd
			_ = json.Unmarshal(m.Data, &e)
			if seq != len(r.chunks)+1 {
				r.broken = fmt.Sprintf("end marker %d after %d chunks", seq, len(r.chunks))
			}
			r.end, r.ended = &e, time.Now()
			close(r.done)
		}
	}
	r.mu.Unlock()
	if m.Reply != "" && answer != "" {
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{wire.HeaderResponse: {answer}}})
	}
}

// wait waits until the call ended (end marker, rejection or broken stream).
func (r *respCall) wait(timeout time.Duration) error {
	select {
	case <-r.done:
		_ = r.sub.Unsubscribe()
		return nil
	case <-time.After(timeout):
		return errors.New(r.id + ": no end within " + timeout.String())
	}
}

// result returns the end marker (nil: none), the chunks and why the stream broke.
func (r *respCall) result() (*wire.ResponseEnd, [][]byte, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end, r.chunks, r.broken
}

// worker returns the worker id of the chosen execution (the Go helper's
// Dispatch-Execution is <worker id>/<instance>/<seq>).
func (r *respCall) worker() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, _, _ := strings.Cut(r.exec, "/")
	return id
}

// content is the text of a chat stream's chunks, in order, and an error
// if a chunk is not a chat.completion.chunk.
func content(chunks [][]byte) (string, error) {
	var b strings.Builder
	for _, c := range chunks {
		var v struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(c, &v); err != nil || v.Object != "chat.completion.chunk" {
			return "", fmt.Errorf("chunk %s: not a chat.completion.chunk", c)
		}
		for _, ch := range v.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String(), nil
}

// expectedContent is what the fake engine streams for n output tokens.
func expectedContent(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, " tok%d", i)
	}
	return b.String()
}

// chatHeader is the gateway's headers for a chat prompt: Dispatch-Api, the
// tenant's fairness key, the input length and the block hashes of the
// engine's token ids (the fake engine's tokenizer is fakeengine.TokenizeChat).
func chatHeader(tenant string, msgs []fakeengine.Message) nats.Header {
	toks := fakeengine.TokenizeChat(msgs, true)
	h := nats.Header{}
	h.Set(wire.HeaderAPI, wire.APIChatCompletions)
	if tenant != "" {
		h.Set(wire.HeaderFairnessKey, tenant)
	}
	h.Set(wire.HeaderISLTokens, strconv.Itoa(len(toks)))
	if hs := wire.ChainHashes(nil, toks, 16); len(hs) > 0 {
		h.Set(wire.HeaderBlockHashes, wire.EncodeHashes(hs))
	}
	return h
}

// chatRequest is an OpenAI chat body as the gateway normalises it.
func chatRequest(msgs []fakeengine.Message, maxTokens int, stream, includeUsage bool) []byte {
	m := map[string]any{"model": "fake-model", "messages": msgs, "max_tokens": maxTokens}
	if stream {
		m["stream"] = true
		if includeUsage {
			m["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	b, _ := json.Marshal(m)
	return b
}
