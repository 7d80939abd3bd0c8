package natstest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// Producer is a producer's end of one response subject (docs/protocol.md,
// Responses), for the tests of workers: it records every message and answers
// each request with its answer func of the message's kind ("" answers
// nothing: no reply at all).
type Producer struct {
	// Sub is the subscription to the response subject.
	Sub *nats.Subscription

	mu     sync.Mutex
	msgs   []*nats.Msg
	answer func(kind string) string
}

// NewProducer subscribes to subject on nc as a Producer answering with answer.
func NewProducer(t testing.TB, nc *nats.Conn, subject string, answer func(kind string) string) *Producer {
	t.Helper()
	p := &Producer{answer: answer}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		p.mu.Lock()
		p.msgs = append(p.msgs, m)
		a := p.answer(m.Header.Get(wire.HeaderResponse))
		p.mu.Unlock()
		if m.Reply != "" && a != "" {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{wire.HeaderResponse: {a}}})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p.Sub = sub
	return p
}

// GoOK is the answer func of a producer that answers go to the claim and ok
// to everything else.
func GoOK(kind string) string {
	if kind == wire.MsgClaim {
		return wire.AnswerGo
	}
	return wire.AnswerOK
}

// CancelPings is GoOK but for pings, which it answers cancel.
func CancelPings(kind string) string {
	if kind == wire.MsgPing {
		return wire.AnswerCancel
	}
	return GoOK(kind)
}

// SetAnswer replaces the answer func.
func (p *Producer) SetAnswer(f func(kind string) string) {
	p.mu.Lock()
	p.answer = f
	p.mu.Unlock()
}

// All returns the messages received so far, in order.
func (p *Producer) All() []*nats.Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*nats.Msg(nil), p.msgs...)
}

// Kinds returns the kinds (Dispatch-Response) received so far, in order.
func (p *Producer) Kinds() []string {
	var out []string
	for _, m := range p.All() {
		out = append(out, m.Header.Get(wire.HeaderResponse))
	}
	return out
}

// Of returns the messages of one kind received so far, in order.
func (p *Producer) Of(kind string) []*nats.Msg {
	var out []*nats.Msg
	for _, m := range p.All() {
		if m.Header.Get(wire.HeaderResponse) == kind {
			out = append(out, m)
		}
	}
	return out
}

// WaitEnd waits until the producer has received one end marker and returns
// it; it fails the test with msg when timeout passes first (Eventually).
func (p *Producer) WaitEnd(t testing.TB, timeout time.Duration, msg string, args ...any) *nats.Msg {
	t.Helper()
	Eventually(t, timeout, func() bool { return len(p.Of(wire.MsgEnd)) == 1 }, msg, args...)
	return p.Of(wire.MsgEnd)[0]
}

// Acks is the Dispatch-Ack subject of one request, for the tests of workers:
// it records every acknowledgement the worker sends and confirms those sent
// as requests, as JetStream does.
type Acks struct {
	mu     sync.Mutex
	bodies []string
}

// WatchAcks subscribes to subject on nc as an Acks.
func WatchAcks(t testing.TB, nc *nats.Conn, subject string) *Acks {
	t.Helper()
	a := &Acks{}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		a.mu.Lock()
		a.bodies = append(a.bodies, string(m.Data))
		a.mu.Unlock()
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// All returns the acknowledgements received so far, in order, progress
// (+WPI) included.
func (a *Acks) All() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.bodies...)
}

// Has reports whether body was received.
func (a *Acks) Has(body string) bool { return slices.Contains(a.All(), body) }

// Final returns the acknowledgements other than progress (+WPI), in order.
func (a *Acks) Final() []string {
	var out []string
	for _, b := range a.All() {
		if b != "+WPI" {
			out = append(out, b)
		}
	}
	return out
}
