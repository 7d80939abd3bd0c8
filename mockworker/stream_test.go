package mockworker_test

import (
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// dispatchTo sends the mock w1 request id as the dispatcher would, asking for
// a response on subject, and returns once it is accepted.
func dispatchTo(t *testing.T, nc *nats.Conn, id string, seq int, subject string, hdr map[string]string, body string) {
	t.Helper()
	m := nats.NewMsg("dispatch.work.w1")
	m.Header.Set(wire.HeaderRequestID, id)
	m.Header.Set(wire.HeaderClass, "regular")
	m.Header.Set(wire.HeaderDPRank, "0")
	m.Header.Set(wire.HeaderSeq, strconv.Itoa(seq))
	m.Header.Set(wire.HeaderCost, "100")
	m.Header.Set(wire.HeaderISLTokens, "100")
	m.Header.Set(wire.HeaderAck, "ack."+id)
	m.Header.Set(wire.HeaderResponseTo, subject)
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	m.Data = []byte(body)
	resp, err := nc.RequestMsg(m, wait)
	if err != nil || resp.Header.Get(wire.HeaderStatus) != "" {
		t.Fatalf("dispatch %s: %v %v", id, err, resp)
	}
}

// confirmAcks answers acknowledgements sent as requests, as JetStream does,
// and records them.
func confirmAcks(t *testing.T, nc *nats.Conn) func(id string) []string {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]string{}
	if _, err := nc.Subscribe("ack.*", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" {
			return
		}
		mu.Lock()
		got[m.Subject[4:]] = append(got[m.Subject[4:]], string(m.Data))
		mu.Unlock()
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return func(id string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got[id]...)
	}
}

// TestStreamsOneChunkPerToken: a request with a response gets one chunk per
// output token, in order, then the end marker with the usage; the first
// chunk comes out of prefill, each further one a decode step later.
func TestStreamsOneChunkPerToken(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	acks := confirmAcks(t, nc)
	startMock(t, nc, mockworker.Config{ID: "w1", OutputTokens: 5, DecodePerToken: 20 * time.Millisecond})
	p := natstest.NewProducer(t, nc, "resp.s1", natstest.GoOK)
	dispatchTo(t, nc, "s1", 1, "resp.s1", nil, "prompt")
	p.WaitEnd(t, wait, "the end marker")
	chunks := p.Of(wire.MsgChunk)
	if len(chunks) != 5 {
		t.Fatalf("%d chunks, want 5", len(chunks))
	}
	for i, c := range chunks {
		if got := c.Header.Get(wire.HeaderResponseSeq); got != strconv.Itoa(i+1) {
			t.Errorf("chunk %d: seq %q", i, got)
		}
	}
	e, err := wire.ParseResponseEnd(p.Of(wire.MsgEnd)[0].Data)
	if err != nil || e.Status != wire.EndOK || e.Chunks != 5 || e.Usage == nil || e.Usage.CompletionTokens != 5 || e.Usage.PromptTokens != 100 {
		t.Errorf("end marker %+v, %v", e, err)
	}
	natstest.Eventually(t, wait, func() bool { return len(acks("s1")) == 1 }, "the confirmed +ACK")
	if got := acks("s1"); got[0] != "+ACK" {
		t.Errorf("acknowledgements %v", got)
	}
}

// TestStreamsOpenAIShapes: chat.completions and completions bodies get
// OpenAI's streaming objects (and the usage chunk with include_usage), or
// the one whole object without stream.
func TestStreamsOpenAIShapes(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	confirmAcks(t, nc)
	startMock(t, nc, mockworker.Config{ID: "w1", DecodePerToken: time.Millisecond})
	for i, c := range []struct {
		api, body, object string
		chunks            int // with the usage chunk
		usage             bool
	}{
		{wire.APIChatCompletions, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion.chunk", 4, true},
		{wire.APICompletions, `{"model":"m","stream":true,"max_tokens":2,"prompt":"hi"}`, "text_completion", 2, false},
		{wire.APIChatCompletions, `{"model":"m","max_tokens":4,"messages":[]}`, "chat.completion", 1, true},
		{wire.APICompletions, `{"model":"m","max_tokens":4,"prompt":"x"}`, "text_completion", 1, true},
	} {
		id := "o" + strconv.Itoa(i)
		p := natstest.NewProducer(t, nc, "resp."+id, natstest.GoOK)
		dispatchTo(t, nc, id, i+1, "resp."+id, map[string]string{wire.HeaderAPI: c.api}, c.body)
		p.WaitEnd(t, wait, "%s: the end marker", id)
		chunks := p.Of(wire.MsgChunk)
		if len(chunks) != c.chunks {
			t.Errorf("%s: %d chunks, want %d", id, len(chunks), c.chunks)
			continue
		}
		for k, ch := range chunks {
			var o struct {
				ID      string            `json:"id"`
				Object  string            `json:"object"`
				Model   string            `json:"model"`
				Choices []json.RawMessage `json:"choices"`
				Usage   *struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(ch.Data, &o); err != nil {
				t.Fatalf("%s chunk %d: %v: %s", id, k, err, ch.Data)
			}
			if o.Object != c.object || o.Model != "m" || o.ID == "" {
				t.Errorf("%s chunk %d: %s", id, k, ch.Data)
			}
			last := k == len(chunks)-1
			if c.usage && last && o.Usage == nil {
				t.Errorf("%s: last chunk has no usage: %s", id, ch.Data)
			}
			if c.usage && c.chunks > 1 && last && len(o.Choices) != 0 {
				t.Errorf("%s: usage chunk has choices: %s", id, ch.Data)
			}
		}
		e, _ := wire.ParseResponseEnd(p.Of(wire.MsgEnd)[0].Data)
		if e.FinishReason != "length" {
			t.Errorf("%s: finish reason %q, want length", id, e.FinishReason)
		}
	}
	p := natstest.NewProducer(t, nc, "resp.bad", natstest.GoOK)
	dispatchTo(t, nc, "bad", 9, "resp.bad", map[string]string{wire.HeaderAPI: "embeddings"}, `{}`)
	if s := p.WaitEnd(t, wait, "the failed end marker").Header.Get(wire.HeaderResponseStatus); s != wire.EndFailed {
		t.Errorf("unknown Dispatch-Api: end status %q, want failed", s)
	}
}

// TestStreamCancelledMidway: a producer answering cancel stops the job at
// once: it leaves the engine (its slot and load freed, a cancelled
// completion record), the response ends cancelled, the message is dropped.
func TestStreamCancelledMidway(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	acks := confirmAcks(t, nc)
	recs := collect(t, nc)
	w := startMock(t, nc, mockworker.Config{ID: "w1", OutputTokens: 100000, DecodePerToken: 10 * time.Millisecond})
	p := natstest.NewProducer(t, nc, "resp.c1", natstest.GoOK)
	dispatchTo(t, nc, "c1", 1, "resp.c1", nil, "")
	natstest.Eventually(t, wait, func() bool { return len(p.Of(wire.MsgChunk)) >= 3 }, "a few chunks")
	p.SetAnswer(natstest.CancelPings)
	natstest.Eventually(t, wait, func() bool { return w.Stats().Cancelled == 1 }, "the job stopped")
	natstest.Eventually(t, wait, func() bool { return len(acks("c1")) == 1 }, "the +TERM")
	if got := acks("c1"); got[0] != "+TERM cancelled" {
		t.Errorf("acknowledgement %v, want +TERM cancelled", got)
	}
	natstest.Eventually(t, wait, func() bool { return len(recs()) == 1 }, "the record")
	if r := recs()[0]; r.Status != wire.StatusCancelled || r.OutputTokens == 0 || r.OutputTokens >= 100000 {
		t.Errorf("record %+v", r.Completion)
	}
	// The end marker goes out before the +TERM and the record, but reaches
	// the producer's subscription, not theirs: its callback, on a goroutine
	// of its own, may not have run yet. Wait for it rather than count once.
	var got struct{ Ends int }
	natstest.Eventually(t, wait, func() bool {
		got.Ends = len(p.Of(wire.MsgEnd))
		return got.Ends == 1
	}, "one end marker (at the deadline: %+v)", &got)
	natstest.Eventually(t, wait, func() bool { return w.Helper().Held() == 0 }, "nothing held")
}
