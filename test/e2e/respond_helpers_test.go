package e2e

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// rsProducer is a producer that asks for a response and follows it as
// docs/protocol.md, What the producer answers, says, written from that
// section alone: it answers claims (the newest claim wins until a chunk is
// seen), pings and end markers, checks the numbering, and declares the
// response broken off after 3 s of silence once it has seen a chunk. Outcomes
// come to the same subject (they carry no Dispatch-Response header).
type rsProducer struct {
	t       testing.TB
	nc      *nats.Conn
	id      string
	subject string
	sub     *nats.Subscription
	stop    chan struct{}

	mu          sync.Mutex
	chosen      string          // the chosen execution
	claims      map[string]bool // every execution that claimed
	chunks      [][]byte        // of the chosen execution
	otherChunks int             // chunks of executions not chosen
	heard       time.Time       // the chosen execution's last message
	end         *wire.ResponseEnd
	broken      string // why the response broke off; "" while it has not
	over        bool
	outcomes    []wire.Outcome
	firstChunk  chan struct{} // closed at the first chunk
}

// rsFollow subscribes to the response subject of request id,
// _RESP.e2e.<id>, before the request is published.
func rsFollow(t testing.TB, nc *nats.Conn, id string) *rsProducer {
	t.Helper()
	return rsFollowOn(t, nc, id, "_RESP.e2e."+id)
}

// rsFollowOn is rsFollow on another subject.
func rsFollowOn(t testing.TB, nc *nats.Conn, id, subject string) *rsProducer {
	t.Helper()
	p := &rsProducer{t: t, nc: nc, id: id, subject: subject, claims: map[string]bool{},
		stop: make(chan struct{}), firstChunk: make(chan struct{})}
	p.sub = subscribe(t, nc, p.subject, p.onMsg)
	go p.watch()
	t.Cleanup(func() { close(p.stop) })
	return p
}

// publish publishes request id to class with the response and outcome
// subjects set, and hdr added.
func (p *rsProducer) publish(js jetstream.JetStream, class string, hdr map[string]string) {
	p.t.Helper()
	h := map[string]string{wire.HeaderResponseTo: p.subject, wire.HeaderReplyTo: p.subject}
	for k, v := range hdr {
		h[k] = v
	}
	publish(p.t, js, "dispatch.req."+class, p.id, h, []byte("prompt of "+p.id))
}

func (p *rsProducer) answer(m *nats.Msg, a string) {
	if m.Reply != "" {
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{wire.HeaderResponse: {a}}})
	}
}

func (p *rsProducer) onMsg(m *nats.Msg) {
	kind := m.Header.Get(wire.HeaderResponse)
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind == "" {
		var o wire.Outcome
		if json.Unmarshal(m.Data, &o) == nil {
			p.outcomes = append(p.outcomes, o)
		}
		return
	}
	exec := m.Header.Get(wire.HeaderExecution)
	seq, _ := wire.ParseResponseSeq(m.Header.Get(wire.HeaderResponseSeq))
	switch kind {
	case wire.MsgClaim:
		p.claims[exec] = true
		switch {
		case p.over:
			p.answer(m, wire.AnswerCancel)
		case p.chosen == "" || p.chosen == exec || len(p.chunks) == 0:
			p.chosen = exec
			p.heard = time.Now()
			p.answer(m, wire.AnswerGo)
		default:
			p.answer(m, wire.AnswerTaken)
		}
	case wire.MsgChunk:
		if exec != p.chosen || p.over {
			p.otherChunks++
			return
		}
		p.heard = time.Now()
		if seq != uint64(len(p.chunks))+1 {
			p.breakOff("chunk " + m.Header.Get(wire.HeaderResponseSeq) + " out of order")
			return
		}
		p.chunks = append(p.chunks, m.Data)
		if len(p.chunks) == 1 {
			close(p.firstChunk)
		}
	case wire.MsgPing:
		switch {
		case p.over:
			p.answer(m, wire.AnswerCancel)
		case exec != p.chosen:
			p.answer(m, wire.AnswerTaken)
		case seq > uint64(len(p.chunks)):
			p.breakOff("chunks lost")
			p.answer(m, wire.AnswerCancel)
		default:
			p.heard = time.Now()
			p.answer(m, wire.AnswerOK)
		}
	case wire.MsgEnd:
		p.answer(m, wire.AnswerOK)
		if exec != p.chosen || p.over {
			return
		}
		if seq != uint64(len(p.chunks))+1 {
			p.breakOff("end marker after lost chunks")
			return
		}
		e, err := wire.ParseResponseEnd(m.Data)
		if err != nil {
			p.breakOff(err.Error())
			return
		}
		p.end, p.over = &e, true
	}
}

// breakOff declares the response broken; p.mu is held.
func (p *rsProducer) breakOff(why string) {
	if !p.over {
		p.broken, p.over = why, true
	}
}

// watch declares the response broken off after wire.SilenceMs without a
// message of the chosen execution once a chunk was seen.
func (p *rsProducer) watch() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if !p.over && len(p.chunks) > 0 && time.Since(p.heard) > wire.SilenceMs*time.Millisecond {
			p.breakOff("silence")
		}
		p.mu.Unlock()
	}
}

// goAway unsubscribes, as a caller that disconnected: the worker's next
// ping finds no responders.
func (p *rsProducer) goAway() {
	p.mu.Lock()
	p.over = true
	p.mu.Unlock()
	_ = p.sub.Unsubscribe()
}

// state returns a copy of what the producer saw.
func (p *rsProducer) state() (chunks int, end *wire.ResponseEnd, broken string, claims, other int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.chunks), p.end, p.broken, len(p.claims), p.otherChunks
}

func (p *rsProducer) outcomesOf(status string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, o := range p.outcomes {
		if o.Status == status {
			n++
		}
	}
	return n
}

// rsCancel publishes a producer's cancellation of id.
func rsCancel(t testing.TB, nc *nats.Conn, id string) {
	t.Helper()
	b, err := wire.MarshalCancel(wire.Cancel{RequestID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("dispatch.cancel", b); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// rsQueues fetches /debug/queues.
func rsQueues(p *proc) (wire.QueueView, bool) {
	var v wire.QueueView
	code, body := p.get("/debug/queues")
	return v, code == 200 && json.Unmarshal([]byte(body), &v) == nil
}
