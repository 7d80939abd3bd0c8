package dispatcher

import (
	"errors"
	"strconv"

	"fairdispatch/bus"
	"fairdispatch/ingest"
	"fairdispatch/metrics"
	"fairdispatch/request"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// letterForm is how much of the request a dead letter carries. A letter the
// DLQ refuses for good (bus.ErrRequestFault) is stored again in the next,
// smaller form, so that a request is never kept from its dead letter by its
// own size or headers (docs/decisions.md, Whose fault is an error).
type letterForm uint8

const (
	// formFull: the body and every header NATS can send.
	formFull letterForm = iota
	// formBodiless: as formFull without the body (Dispatch-Body-Dropped).
	formBodiless
	// formBare: without the body and without any original header
	// (Dispatch-Headers-Dropped: all).
	formBare
)

// reject dead-letters h; its message is acknowledged once the DLQ copy is stored.
func (a *Actor) reject(h *held, e *scheduler.Error) {
	r := h.snap
	h.dead, h.err = true, e
	a.d.Metrics.Rejected(r.Class, e.Code)
	a.traceReject(h, e.Code)
	a.d.Keeper.Drop(r.Ref) // a dead letter is not kept alive: its publish is acknowledged in ms
	a.storeDead(h)
}

// storeDead publishes h's dead letter in form h.form; its acknowledgement
// comes back to the actor as a dlqDone. A letter the dead letterer refuses at
// once is handled as one that failed.
func (a *Actor) storeDead(h *held) {
	r, seq := h.snap, h.snap.Ref
	class := h.msg.Token() // the subject token when no class could be resolved
	if r.Class >= 0 {
		class = a.className(r.Class)
	} else if !bus.ValidToken(class) || len(class) > wire.MaxTokenLen {
		// The letter must have a subject to be stored, and one the server
		// takes: a token of thousands of bytes makes the publish line too
		// long, and the server closes the connection.
		class = bus.UnresolvedClass
	}
	err := a.d.DeadLetters.Publish(bus.DeadLetter{
		Class: class, RequestID: r.ID, Code: string(h.err.Code), Message: h.err.Message,
		Subject: h.msg.Subject(), Header: h.msg.Header(), Body: h.msg.Data(), DropBody: h.form >= formBodiless, Bare: h.form >= formBare,
	}, func(err error) { a.dlq.put(dlqDone{seq, err}) })
	if err != nil {
		a.deadLetterFailed(h, err)
	}
}

func (a *Actor) deadLettered(d dlqDone) {
	h := a.held[d.seq]
	if h == nil || !h.dead {
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
	a.lettered.put(a.cfg.Now().UnixNano(), letterKey(d.seq, h.snap.Arrival), struct{}{})
	a.dropHeld(d.seq, h)
	h.rel.Release(1)
	if h.replyTo != "" {
		r, e := h.snap, h.err
		o := wire.Outcome{RequestID: r.ID, Status: wire.StatusRejected, Error: string(e.Code), Message: e.Message, Attempt: uint64(h.attempt)}
		if r.Class >= 0 {
			o.PolicyClass = a.className(r.Class)
		}
		switch e.Code {
		case request.QueueFull:
			o.Details = map[string]any{"limit_kind": e.LimitKind, "current": e.Current, "limit": e.Limit}
		case request.DeadlineUnreachable:
			o.Details = map[string]any{"projected_wait_ms": e.Projected / 1e6}
		case request.BudgetExceeded:
			// The gateway's 429 Retry-After (docs/protocol.md, Error codes).
			o.Details = map[string]any{"projected_wait_ms": e.Projected / 1e6, "retry_after_ms": (e.RetryAfter + 1e6 - 1) / 1e6}
		}
		a.outcome(h.replyTo, o)
	}
}

// maxLettered bounds the dead-lettered messages remembered
// (letteredBefore): at most about 4 MB.
const maxLettered = 100_000

// letterKey names a message by its stream sequence and its publication
// time (Unix ns): a stream deleted and made again numbers its messages from
// 1 anew, and one of those must not be taken for a letter of the old.
func letterKey(seq uint64, published int64) string {
	return strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(published, 10)
}

// letteredBefore acknowledges again, and reports true for, a redelivery of a
// message whose dead letter was stored and which was acknowledged within the
// last ten minutes (or three ack waits, if longer): that plain +ACK was lost
// (a server restart, a consumer leader change), and the request must not be
// admitted again, run, or answered a second time (docs/protocol.md, Dead
// letters).
func (a *Actor) letteredBefore(dl *ingest.Delivery) bool {
	if a.lettered.len() == 0 {
		return false
	}
	if _, ok := a.lettered.get(letterKey(dl.StreamSeq, dl.Published.UnixNano())); !ok {
		return false
	}
	if err := dl.Msg.Ack(); err != nil {
		a.log.Warn().Err(err).Uint64("stream_seq", dl.StreamSeq).Msg("ack again after dead letter")
	}
	a.cur.rel.Release(1)
	a.log.Info().Uint64("stream_seq", dl.StreamSeq).Str("request_id", dl.Headers.MsgID).
		Msg("redelivered after its dead letter was stored: acknowledged again")
	return true
}

// deadLetterFailed handles a dead letter the bus could not store for good
// (it retries what a retry can fix). When the letter itself is refused
// (bus.ErrRequestFault: too large, a header or subject NATS cannot take), it
// is stored again in the next smaller form: without the body, then without
// any original header. When even that fails, or the DLQ cannot take letters
// at all (bus.ErrConnectionFault; bus.ErrStoreFull: no room in the DLQ or the
// JetStream store), the message goes back to the stream, redelivered only
// after the ack wait: it is neither lost nor spun on, it frees its held slot
// (a full DLQ must not stop the dispatcher pulling other requests), and each
// such return is counted. Returns for want of room are logged at most every
// 10 s, with the count suppressed since.
func (a *Actor) deadLetterFailed(h *held, err error) {
	r := h.snap
	if bus.Fault(err) == bus.ErrRequestFault && h.form < formBare {
		h.form++
		action := metrics.DLQBodyDropped
		if h.form == formBare {
			action = metrics.DLQHeadersDropped
		}
		a.d.Metrics.DeadLetterFailed(action)
		a.log.Error().Err(err).Str("request_id", r.ID).Str("action", action).Msg("dead letter not stored; storing a smaller one")
		a.storeDead(h)
		return
	}
	a.dropHeld(r.Ref, h)
	h.rel.Release(1)
	if errors.Is(err, bus.ErrClosed) { // shutting down: the next dispatcher takes it at once
		_ = h.msg.Nak()
		return
	}
	a.d.Metrics.DeadLetterFailed(metrics.DLQReturned)
	_ = h.msg.NakWithDelay(a.cfg.AckWait)
	if !errors.Is(err, bus.ErrStoreFull) {
		a.log.Error().Err(err).Str("request_id", r.ID).Dur("retry_in", a.cfg.AckWait).Msg("dead letter not stored; the request goes back to the stream")
		return
	}
	if ok, suppressed := a.ops.full.allow("", a.cfg.Now()); ok {
		a.log.Error().Err(err).Str("request_id", r.ID).Int("suppressed", suppressed).Dur("retry_in", a.cfg.AckWait).
			Msg("dead letter refused: no room in the DLQ or the JetStream store; the request goes back to the stream, to be dead-lettered again after the ack wait " +
				"(logged at most every 10 s; fairdispatch_dead_letter_failures_total{action=\"returned\"} counts every one; docs/operations.md, When storage runs out)")
	}
}

func (a *Actor) outcome(subject string, o wire.Outcome) {
	if err := a.d.Outcome(subject, o); err != nil {
		a.log.Warn().Err(err).Str("request_id", o.RequestID).Str("subject", subject).Msg("outcome not published")
	}
}
