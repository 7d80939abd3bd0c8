package dispatcher

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/request"
	"fairdispatch/scheduler"
)

// reject dead-letters h; its message is acknowledged once the DLQ copy is stored.
func (a *Actor) reject(h *held, e *scheduler.Error) {
	r := h.snap
	h.dead, h.err = true, e
	a.d.Metrics.Rejected(r.Class, e.Code)
	a.d.Keeper.Drop(r.Ref) // a dead letter is not kept alive: its publish is acknowledged in ms
	if err := a.publishDead(h, h.msg.Headers(), h.msg.Data()); err != nil {
		a.log.Error().Err(err).Str("request_id", r.ID).Msg("dead letter refused; handing the message back")
		a.handBack(r.Ref, h)
	}
}

// publishDead publishes h's dead letter with these headers and body; its
// acknowledgement comes back to the actor as a dlqDone.
func (a *Actor) publishDead(h *held, hdr nats.Header, body []byte) error {
	r, seq := h.snap, h.snap.Ref
	class := h.token // the subject token when no class could be resolved
	if r.Class >= 0 {
		class = a.className(r.Class)
	}
	return a.d.DeadLetters.Publish(bus.DeadLetter{
		Class: class, RequestID: r.ID, Code: string(h.err.Code), Message: h.err.Message, Header: hdr, Body: body,
	}, func(err error) { a.dlq <- dlqDone{seq, err} })
}

func (a *Actor) deadLettered(d dlqDone) {
	h := a.held[d.seq]
	if h == nil {
		return
	}
	if d.err != nil {
		a.deadLetterFailed(h, d.err)
		return
	}
	a.d.Metrics.DeadLetter(h.snap.Class)
	if err := h.msg.Ack(); err != nil {
		a.log.Warn().Err(err).Str("request_id", h.snap.ID).Msg("ack after dead letter")
	}
	delete(a.held, d.seq)
	h.rel.Release(1)
	if h.replyTo != "" {
		r, e := h.snap, h.err
		o := bus.OutcomeMsg{RequestID: r.ID, Status: bus.StatusRejected, Error: string(e.Code), Message: e.Message, Attempt: attempt(h.msg)}
		if r.Class >= 0 {
			o.PolicyClass = a.className(r.Class)
		}
		if e.Code == request.QueueFull {
			o.Details = map[string]any{"limit_kind": e.LimitKind, "current": e.Current, "limit": e.Limit}
		}
		a.outcome(h.replyTo, o)
	}
}

// deadLetterFailed handles a dead letter the bus could not store for good (it
// retries what a retry can fix). The first time, it stores a copy without the
// body (a body too large for the DLQ is the usual cause), saying so in
// Dispatch-Body-Dropped; if that fails too, the message goes back to the
// stream, redelivered only after the ack wait, so it is neither lost nor spun on.
func (a *Actor) deadLetterFailed(h *held, err error) {
	r := h.snap
	if !h.bodiless {
		h.bodiless = true
		a.log.Error().Err(err).Str("request_id", r.ID).Msg("dead letter not stored; storing it without its body")
		hdr := make(nats.Header, len(h.msg.Headers())+1)
		for k, v := range h.msg.Headers() {
			hdr[k] = v
		}
		hdr.Set("Dispatch-Body-Dropped", strconv.Itoa(len(h.msg.Data())))
		if a.publishDead(h, hdr, nil) == nil {
			return
		}
	}
	a.log.Error().Err(err).Str("request_id", r.ID).Dur("retry_in", a.cfg.AckWait).Msg("dead letter not stored; the request goes back to the stream")
	_ = h.msg.NakWithDelay(a.cfg.AckWait)
	delete(a.held, r.Ref)
	h.rel.Release(1)
}

func (a *Actor) outcome(subject string, o bus.OutcomeMsg) {
	if err := a.d.Outcome(subject, o); err != nil {
		a.log.Warn().Err(err).Str("request_id", o.RequestID).Str("subject", subject).Msg("outcome not published")
	}
}
