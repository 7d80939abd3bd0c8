package dispatcher

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/metrics"
	"fairdispatch/request"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// drain dispatches while anything queued is dispatchable.
func (a *Actor) drain() {
	if !a.connected || !a.active() {
		return
	}
	now := a.cfg.Now()
	ns := now.UnixNano()
	for a.leading.Load() && !a.sendPaused {
		d := a.d.Scheduler.Next(ns)
		if d.Kind == scheduler.None {
			return
		}
		a.decide(now, a.held[d.Req.Ref], d)
	}
}

// decide carries out a scheduler decision about held request h.
func (a *Actor) decide(now time.Time, h *held, d scheduler.Decision) {
	switch d.Kind {
	case scheduler.Dispatch:
		a.send(now, h, d)
	case scheduler.Reject:
		a.reject(h, d.Err)
	}
}

func (a *Actor) send(now time.Time, h *held, d scheduler.Decision) {
	r := h.snap
	h.inFlight, h.worker, h.rank, h.seq, h.rev = true, d.Worker, d.Rank, d.Seq, a.polRev
	a.inFlight++
	if d.KVPrompt > 0 {
		a.d.KVMetrics.Dispatch(d.KVPrompt, d.KVOverlap)
	}
	a.d.Keeper.Drop(r.Ref)
	var err error
	if d.Compact > 0 {
		err = a.sendCompact(now, h, d)
	} else {
		err = a.d.Handshaker.Send(d.Worker, a.dispatchHeaders(now, h, d), h.msg.Data(), r.Ref)
	}
	if err != nil {
		a.sendFailed(now, h, d, err)
	}
}

// dispatchHeaders returns the header form's headers of dispatching h
// (docs/protocol.md, Dispatch handshake): the producer's, but for any
// variant of the eight the dispatcher sets. The map and its values are
// reused from one dispatch to the next: Send encodes them before returning.
func (a *Actor) dispatchHeaders(now time.Time, h *held, d scheduler.Decision) nats.Header {
	r := h.snap
	hdr := a.hdr
	clear(hdr)
	n := h.msg.HeaderValues() + len(wire.DispatchHeaders)
	if cap(a.hdrVals) < n {
		a.hdrVals = make([]string, n)
	}
	v := h.msg.CopyHeaders(hdr, isOwnHeader, a.hdrVals[:n])
	v[0], v[1], v[2] = r.ID, a.className(r.Class), strconv.Itoa(int(d.Rank))
	v[3], v[4] = strconv.FormatUint(d.Seq, 10), strconv.FormatUint(r.Cost, 10)
	v[5], v[6], v[7] = strconv.FormatInt(queuedMs(now, r), 10), h.msg.Reply(), a.ackWaitMs
	for i, k := range wire.DispatchHeaders {
		hdr[k] = v[i : i+1 : i+1]
	}
	if d.Prefill != 0 && d.Prefill != r.Cost {
		hdr[wire.HeaderPrefillTokens] = []string{strconv.FormatUint(d.Prefill, 10)}
	}
	return hdr
}

// sendCompact sends h in the compact dispatch form (docs/protocol.md,
// Compact dispatch form): no NATS headers, a body that frames the same
// fields, the producer's headers as the header form forwards them, and the
// request body. The frame's buffer is reused, up to maxKeptFrame.
func (a *Actor) sendCompact(now time.Time, h *held, d scheduler.Decision) error {
	r := h.snap
	if bad := h.msg.HeaderNamesWhere(unsendable); bad != nil {
		return bus.UnsendableHeaders(bad) // as the header form would fail
	}
	f := wire.AppendDispatchFields(a.frame[:0], &wire.Dispatch{
		RequestID: r.ID, Class: a.className(r.Class), DPRank: uint32(d.Rank), Seq: d.Seq, Cost: r.Cost,
		QueuedMs: uint64(queuedMs(now, r)), Ack: h.msg.Reply(), AckWaitMs: uint64(a.cfg.AckWait.Milliseconds()),
	})
	f = h.msg.AppendHeaders(f, isOwnHeader)
	if d.Prefill != 0 && d.Prefill != r.Cost {
		var num [20]byte
		f = wire.AppendHeaderEntry(f, wire.HeaderPrefillTokens, []string{string(strconv.AppendUint(num[:0], d.Prefill, 10))})
	}
	f = append(wire.EndHeaders(f), h.msg.Data()...)
	if cap(f) <= maxKeptFrame {
		a.frame = f
	}
	return a.d.Handshaker.Send(d.Worker, nil, f, r.Ref)
}

func unsendable(name string) bool { return !bus.HeaderNameOK(name) }

// maxKeptFrame bounds the compact frame buffer the actor keeps between
// dispatches: a larger request's frame is left to the collector.
const maxKeptFrame = 64 << 10

// sendFailed handles a dispatch that could not be sent, by whose fault it is
// (docs/decisions.md, Whose fault is an error):
//   - the request's (bus.ErrRequestFault: over max_payload with the dispatch
//     headers, a header NATS cannot send): the booking is released, the
//     worker is not blamed, and the request is dead-lettered as bad_request,
//     without its body when its size is the problem;
//   - the worker's (bus.ErrWorkerFault): handled as a refusal;
//   - the connection's (anything else): the booking is released, the request
//     keeps its place in its lane, and dispatching pauses until the next tick
//     or connection event, so that a send failing over and over costs one
//     attempt per tick.
func (a *Actor) sendFailed(now time.Time, h *held, d scheduler.Decision, err error) {
	r := h.snap
	ev := a.log.Warn().Err(err).Str("request_id", r.ID).Str("worker_id", d.Worker)
	switch bus.Fault(err) {
	case bus.ErrWorkerFault:
		a.d.Metrics.SendFailed(metrics.FaultWorker)
		ev.Msg("dispatch send failed: the worker is excluded as after a refusal")
		a.answer(bus.Result{Token: r.Ref, Worker: d.Worker, Outcome: bus.Refused})
		return
	case bus.ErrRequestFault:
		a.d.Metrics.SendFailed(metrics.FaultRequest)
		ev.Msg("dispatch send failed: the request cannot be forwarded; dead-lettering it")
		h.inFlight = false
		a.inFlight--
		a.d.Scheduler.Unsent(r, d.Worker, d.Seq, false)
		reason := err.Error()
		var rf *bus.RequestFault
		if errors.As(err, &rf) {
			reason = rf.Reason
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			h.form = formBodiless // the body is what does not fit
		}
		a.reject(h, &scheduler.Error{Code: request.BadRequest, Message: reason})
	default:
		a.d.Metrics.SendFailed(metrics.FaultConnection)
		ev.Msg("dispatch send failed: the request keeps its place; dispatching pauses until the next tick")
		h.inFlight = false
		a.inFlight--
		a.sendPaused = true
		a.d.Scheduler.Unsent(r, d.Worker, d.Seq, true)
		if err := h.msg.InProgress(); err == nil { // as in answer: the Keeper's clock is the server's
			a.d.Metrics.ProgressAck()
		}
		a.wait(h, r.Ref, now)
	}
}

func isOwnHeader(k string) bool {
	if p := len(wire.HeaderPrefix); len(k) < p || !strings.EqualFold(k[:p], wire.HeaderPrefix) {
		return false
	}
	for _, o := range wire.DispatchHeaders {
		if strings.EqualFold(k, o) {
			return true
		}
	}
	return strings.EqualFold(k, wire.HeaderPrefillTokens)
}

// answer handles a worker's answer to a dispatch.
func (a *Actor) answer(res bus.Result) {
	h := a.held[res.Token]
	if h == nil || !h.inFlight {
		return
	}
	h.inFlight = false
	a.inFlight--
	now := a.cfg.Now()
	a.d.Metrics.Handshake(res.Outcome.String())
	a.traceDispatch(now, h, res.Outcome.String())
	if res.Outcome == bus.Accepted {
		a.d.Scheduler.Accepted(h.worker)
		r := h.snap
		a.dropHeld(res.Token, h)
		h.rel.Release(1)
		defer a.takeRedelivery(now, h, true)
		a.running.put(now.UnixNano(), r.ID, runRef{h.worker, h.seq})
		a.d.Scheduler.Started(now.UnixNano(), r, h.worker, h.rank, h.seq)
		a.d.Metrics.Dispatched(r.Class)
		a.countServed(r.Class, r.Cost)
		a.d.Metrics.QueueWait(r.Class, float64(max(0, now.UnixNano()-r.Arrival))/1e9)
		if h.replyTo != "" {
			rank, q := int(h.rank), queuedMs(now, r)
			a.outcome(h.replyTo, wire.Outcome{RequestID: r.ID, Status: wire.StatusDispatched,
				PolicyClass: a.className(r.Class), WorkerID: h.worker, DPRank: &rank, QueuedMs: &q, Attempt: uint64(h.attempt),
				PolicyRevision: h.rev})
		}
		if h.cancel { // cancelled during the handshake (cancel.go)
			a.forwardCancel(r.ID, runRef{h.worker, h.seq})
		}
		return
	}
	a.takeRedelivery(now, h, false)
	if res.Outcome == bus.Timeout {
		a.log.Debug().Str("request_id", h.snap.ID).Str("worker_id", h.worker).Msg("dispatch timed out; the request keeps its place")
	}
	if !a.active() {
		a.d.Scheduler.Refused(now.UnixNano(), h.worker, h.seq)
		if h.cancel {
			// Cancelled during the handshake: dropped, not handed back,
			// where the next leader (or this one restarted) may not
			// remember the cancellation and would run it.
			a.cancelQueued(now, res.Token, h)
			return
		}
		a.handBack(res.Token, h)
		return
	}
	a.d.Scheduler.Return(now.UnixNano(), h.snap, h.worker, h.seq)
	// The ack wait last restarted up to half an ack wait plus the dispatch
	// timeout ago: restart it now, so the Keeper's clock is the server's.
	if err := h.msg.InProgress(); err == nil {
		a.d.Metrics.ProgressAck()
	}
	a.wait(h, res.Token, now)
	if h.cancel { // cancelled during the handshake: it leaves now (cancel.go)
		a.cancelQueued(now, res.Token, h)
	}
}
