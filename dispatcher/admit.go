package dispatcher

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"fairdispatch/ingest"
	"fairdispatch/request"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// mergeDelivery keeps one copy of a request held and delivered again: the new
// handle, whose acknowledgement JetStream now waits on.
func (a *Actor) mergeDelivery(h *held, m ingest.Msg, attempt uint32, rel Releaser) {
	h.msg, h.attempt = m, attempt
	h.msg.OwnBody() // rare: not worth knowing whether it waits
	rel.Release(1)
}

// takeRedelivery settles the delivery that came during h's handshake, now
// answered: after an acceptance (accepted) it is admitted anew, since the
// worker may have handed the request back at once (this delivery would
// otherwise wait out the ack wait), and a worker that runs it joins it
// (docs/protocol.md, A second dispatch of a request already running); after
// anything else it replaces h's handle, as a redelivery of a queued request.
func (a *Actor) takeRedelivery(now time.Time, h *held, accepted bool) {
	r := h.redo
	if r == nil {
		return
	}
	h.redo = nil
	if !accepted {
		a.mergeDelivery(h, r.dl.Msg, deliveryCount(&r.dl), r.rel)
		return
	}
	if !a.active() || r.rel != a.cur.rel {
		_ = r.dl.Msg.Nak() // another term's, or not leading: back to the stream
		r.rel.Release(1)
		return
	}
	a.admit(now, &r.dl)
}

// admit takes in one delivery of the current term (a.cur).
func (a *Actor) admit(now time.Time, dl *ingest.Delivery) {
	if h := a.held[dl.StreamSeq]; h != nil {
		a.d.Metrics.Redelivered()
		if h.inFlight {
			// Its dispatch is being answered: which copy to keep depends on
			// the answer (answer, takeRedelivery).
			if h.redo != nil {
				h.redo.rel.Release(1) // a newer delivery supersedes it
			}
			h.redo = &redelivery{dl: *dl, rel: a.cur.rel}
			h.redo.dl.Msg.OwnBody()
			return
		}
		a.mergeDelivery(h, dl.Msg, deliveryCount(dl), a.cur.rel)
		return
	}
	if !a.active() {
		_ = dl.Msg.Nak()
		a.cur.rel.Release(1)
		return
	}
	if dl.NumDelivered > 1 && a.letteredBefore(dl) {
		return
	}
	id := dl.Headers.MsgID
	if id == "" {
		id = a.cfg.Stream + ":" + strconv.FormatUint(dl.StreamSeq, 10)
	}
	if a.cancelledAtAdmission(now, dl, id) {
		return
	}
	h := &held{msg: dl.Msg, rel: a.cur.rel, replyTo: dl.Headers.ReplyTo, attempt: deliveryCount(dl)}
	a.held[dl.StreamSeq] = h
	a.byID[id] = dl.StreamSeq
	if msg, replyBad := a.malformed(dl); msg != "" {
		if replyBad {
			h.replyTo = "" // the reply subject itself is what is refused
		}
		h.snap = &request.Snapshot{ID: id, Ref: dl.StreamSeq, Class: -1, Arrival: dl.Published.UnixNano(), Index: -1, DeadlineIndex: -1}
		h.err = &scheduler.Error{Code: request.BadRequest, Message: msg}
		if a.d.Scheduler.InGrace(now.UnixNano()) {
			a.wait(h, dl.StreamSeq, now)
			a.parked = append(a.parked, h) // nothing is failed during the grace (docs/design.md, Delivery guarantees)
			return
		}
		a.reject(h, h.err)
		return
	}
	token := dl.Msg.Token()
	a.noteToken(token)
	arr := &dl.Headers.Arrival
	arr.ID, arr.Ref, arr.Token, arr.Published = id, dl.StreamSeq, token, dl.Published.UnixNano()
	d := a.d.Scheduler.Arrive(now.UnixNano(), arr)
	h.snap = d.Req
	if d.Req.Preempted > 0 {
		a.d.Metrics.Preempted(a.className(d.Req.Class), "returned")
	}
	a.traceArrive(now, h)
	if d.Kind == scheduler.Queued {
		a.wait(h, dl.StreamSeq, now) // only what waits needs keeping alive
	}
	a.decide(now, h, d)
}

// wait keeps h's message alive while the request waits in the dispatcher,
// and moves its body out of the client's receive buffer (ingest.Msg.OwnBody).
func (a *Actor) wait(h *held, seq uint64, now time.Time) {
	h.msg.OwnBody()
	a.d.Keeper.Hold(seq, &h.msg, now)
}

// malformed returns why a delivery is a bad_request, or "": a malformed header
// (docs/protocol.md, Request headers), or a Dispatch-Reply-To or
// Dispatch-Response-To aimed at a $-subject or at the dispatch protocol's own
// subjects, where an outcome or a worker's response could pose as a load
// report, a request or a JetStream API call. replyBad says the reply subject
// itself is refused: no outcome may go there.
//
// A reserved reply subject is refused whatever else is malformed: no outcome
// goes there. The message names the first malformed header in the table's
// order, the reserved subjects counted as malformed in their header's place.
func (a *Actor) malformed(dl *ingest.Delivery) (msg string, replyBad bool) {
	var reserved *ingest.HeaderError
	if r := dl.Headers.ReplyTo; r != "" && a.protocolSubject(r) {
		reserved, replyBad = a.reservedSubject(wire.HeaderReplyTo, r), true
	}
	var he *ingest.HeaderError
	switch {
	case dl.Err != nil && reserved != nil && errors.As(dl.Err, &he) && !he.Precedes(wire.HeaderReplyTo):
		return reserved.Error(), true
	case dl.Err != nil:
		return dl.Err.Error(), replyBad
	case reserved != nil:
		return reserved.Error(), true
	}
	if r := dl.Headers.ResponseTo; r != "" && a.protocolSubject(r) {
		return a.reservedSubject(wire.HeaderResponseTo, r).Error(), false
	}
	return "", false
}

// reservedSubject is the error for header's subject s, one of the
// protocol's own.
func (a *Actor) reservedSubject(header, s string) *ingest.HeaderError {
	return ingest.NewHeaderError(header, s, fmt.Sprintf("may not start with \"$\" or %q", a.cfg.Prefix+"."))
}

// protocolSubject reports whether s is a $-subject or one of the prefix's.
func (a *Actor) protocolSubject(s string) bool {
	return s[0] == '$' || strings.HasPrefix(s, a.cfg.Prefix+".")
}
