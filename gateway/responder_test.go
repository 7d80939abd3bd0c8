package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// responder is the test double of a dispatcher and its workers for the
// gateway's tests: it pulls each request from the stream and plays the
// worker's side of docs/protocol.md, Responses, in the OpenAI shapes of
// Responses: OpenAI-shaped requests. The last user message (or the prompt)
// steers it: "reject:<code>" rejects the request with that code, "hold"
// claims and pings but never ends (until cancelled), "cancelled" ends it
// cancelled before any chunk, "vanish" claims, sends one chunk and is never
// heard from again (a worker that crashed mid-response), "fail:<error>" and
// "refuse:<error>" claim and end the response failed (refused, as the
// engine worker ends a request its engine answered 4xx) before any chunk,
// anything else streams max_tokens chunks of one token each.
type responder struct {
	t    testing.TB
	nc   *nats.Conn
	mu   sync.Mutex
	seen []nats.Header // each request's headers, in arrival order
	held map[string]bool
	done chan struct{}
}

func startResponder(t testing.TB, nc *nats.Conn) *responder {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := natstest.RequestStream(t, js, "dispatch")
	cons := natstest.PullConsumer(t, st, 30*time.Second)
	r := &responder{t: t, nc: nc, held: map[string]bool{}, done: make(chan struct{})}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		go r.serve(m.Headers(), m.Data())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Stop(); close(r.done) })
	return r
}

func (r *responder) headers() []nats.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nats.Header(nil), r.seen...)
}

// holding reports how many held requests still run (not cancelled).
func (r *responder) holding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.held {
		if v {
			n++
		}
	}
	return n
}

func (r *responder) serve(h nats.Header, body []byte) {
	r.mu.Lock()
	r.seen = append(r.seen, h)
	r.mu.Unlock()
	id := h.Get("Nats-Msg-Id")
	subj := h.Get(wire.HeaderResponseTo)
	var req struct {
		Model     string `json:"model"`
		Stream    bool   `json:"stream"`
		MaxTokens int    `json:"max_tokens"`
		Prompt    any    `json:"prompt"`
		Messages  []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	steer := fmt.Sprint(req.Prompt)
	if n := len(req.Messages); n > 0 {
		steer = req.Messages[n-1].Content
	}
	if code, ok := strings.CutPrefix(steer, "reject:"); ok {
		out := wire.Outcome{RequestID: id, Status: wire.StatusRejected, PolicyClass: "c", Error: code, Message: "rejected by the test"}
		if code == "budget_exceeded" { // as the dispatcher details it: 2.5 s until it fits
			out.Details = map[string]any{"projected_wait_ms": 9000, "retry_after_ms": 2500}
		}
		o, _ := wire.MarshalOutcome(out)
		_ = r.nc.Publish(h.Get(wire.HeaderReplyTo), o)
		return
	}
	exec := id + "-x"
	ask := func(kind string, seq int) string {
		m := nats.NewMsg(subj)
		m.Header.Set(wire.HeaderResponse, kind)
		m.Header.Set(wire.HeaderRequestID, id)
		m.Header.Set(wire.HeaderExecution, exec)
		if seq >= 0 {
			m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
		}
		resp, err := r.nc.RequestMsg(m, time.Second)
		if err != nil {
			return "none"
		}
		return resp.Header.Get(wire.HeaderResponse)
	}
	o, _ := wire.MarshalOutcome(wire.Outcome{RequestID: id, Status: wire.StatusDispatched, PolicyClass: "c", WorkerID: "w1"})
	_ = r.nc.Publish(h.Get(wire.HeaderReplyTo), o)
	if ask(wire.MsgClaim, -1) != wire.AnswerGo {
		return
	}
	if why, ok := strings.CutPrefix(steer, "fail:"); ok {
		endResponse(r.nc, subj, id, exec, 1, wire.ResponseEnd{Status: wire.EndFailed, Error: why})
		return
	}
	if steer == "cancelled" {
		endResponse(r.nc, subj, id, exec, 1, wire.ResponseEnd{Status: wire.EndCancelled})
		return
	}
	if why, ok := strings.CutPrefix(steer, "refuse:"); ok {
		endResponse(r.nc, subj, id, exec, 1, wire.ResponseEnd{Status: wire.EndFailed, Error: why, Refused: true})
		return
	}
	if steer == "vanish" {
		chunk(r.nc, subj, id, exec, 1, mkChunk(h.Get(wire.HeaderAPI), req.Model, "x", ""))
		return
	}
	if steer == "hold" {
		r.mu.Lock()
		r.held[id] = true
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.held[id] = false
			r.mu.Unlock()
		}()
		chunk(r.nc, subj, id, exec, 1, mkChunk(h.Get(wire.HeaderAPI), req.Model, "x", ""))
		for i := 0; ; i++ {
			select {
			case <-r.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if a := ask(wire.MsgPing, 1); a != wire.AnswerOK {
				return
			}
		}
	}
	n := max(req.MaxTokens, 1)
	api := h.Get(wire.HeaderAPI)
	seq := 0
	if req.Stream {
		for i := range n {
			finish := ""
			if i == n-1 {
				finish = "length"
			}
			seq++
			chunk(r.nc, subj, id, exec, seq, mkChunk(api, req.Model, "t"+strconv.Itoa(i)+" ", finish))
		}
		seq++
		chunk(r.nc, subj, id, exec, seq, fmt.Sprintf(`{"id":"x","object":%q,"created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`,
			chunkObject(api), req.Model, n, n+7))
	} else {
		seq++
		chunk(r.nc, subj, id, exec, seq, mkWhole(api, req.Model, n))
	}
	endResponse(r.nc, subj, id, exec, seq+1, wire.ResponseEnd{Status: wire.EndOK, Chunks: uint64(seq), FinishReason: "length",
		Usage: &wire.Usage{PromptTokens: 7, CompletionTokens: uint64(n)}})
}

// endResponse sends the end marker e as message number seq and waits for
// the producer's answer.
func endResponse(nc *nats.Conn, subj, id, exec string, seq int, e wire.ResponseEnd) {
	m := nats.NewMsg(subj)
	m.Header.Set(wire.HeaderResponse, wire.MsgEnd)
	m.Header.Set(wire.HeaderRequestID, id)
	m.Header.Set(wire.HeaderExecution, exec)
	m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
	m.Header.Set(wire.HeaderResponseStatus, e.Status)
	m.Data, _ = wire.MarshalResponseEnd(e)
	_, _ = nc.RequestMsg(m, time.Second)
}

func chunk(nc *nats.Conn, subj, id, exec string, seq int, data string) {
	m := nats.NewMsg(subj)
	m.Header.Set(wire.HeaderResponse, wire.MsgChunk)
	m.Header.Set(wire.HeaderRequestID, id)
	m.Header.Set(wire.HeaderExecution, exec)
	m.Header.Set(wire.HeaderResponseSeq, strconv.Itoa(seq))
	m.Data = []byte(data)
	_ = nc.PublishMsg(m)
}

func chunkObject(api string) string {
	if api == wire.APIChatCompletions {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

func mkChunk(api, model, text, finish string) string {
	fr := "null"
	if finish != "" {
		fr = strconv.Quote(finish)
	}
	if api == wire.APIChatCompletions {
		return fmt.Sprintf(`{"id":"x","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`, model, text, fr)
	}
	return fmt.Sprintf(`{"id":"x","object":"text_completion","created":1,"model":%q,"choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":%s}]}`, model, text, fr)
}

func mkWhole(api, model string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "t%d ", i)
	}
	usage := fmt.Sprintf(`{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}`, n, n+7)
	if api == wire.APIChatCompletions {
		return fmt.Sprintf(`{"id":"x","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"length"}],"usage":%s}`, model, b.String(), usage)
	}
	return fmt.Sprintf(`{"id":"x","object":"text_completion","created":1,"model":%q,"choices":[{"index":0,"text":%q,"logprobs":null,"finish_reason":"length"}],"usage":%s}`, model, b.String(), usage)
}

var _ = context.Background
