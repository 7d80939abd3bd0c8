package dispatcher

import (
	"strconv"
	"strings"
	"time"

	"fairdispatch/bus"
	"fairdispatch/scheduler"
)

// drain dispatches while anything queued is dispatchable.
func (a *Actor) drain() {
	if !a.connected || !a.active() {
		return
	}
	now := a.cfg.Now()
	ns := now.UnixNano()
	for a.leading.Load() {
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

// dispatch headers the actor sets; any producer-sent variant of them is removed.
var ownHeaders = []string{"Dispatch-Request-Id", "Dispatch-Class", "Dispatch-DP-Rank", "Dispatch-Seq",
	"Dispatch-Cost", "Dispatch-Queued-Ms", "Dispatch-Ack"}

func (a *Actor) send(now time.Time, h *held, d scheduler.Decision) {
	r := h.snap
	src := h.msg.Headers()
	hdr := a.hdr // reused: Send encodes it before returning
	clear(hdr)
	for k, v := range src {
		if !isOwnHeader(k) {
			hdr[k] = v
		}
	}
	// One backing array for the seven values: one allocation, not seven.
	v := make([]string, len(ownHeaders))
	v[0], v[1], v[2] = r.ID, a.className(r.Class), strconv.Itoa(int(d.Rank))
	v[3], v[4] = strconv.FormatUint(d.Seq, 10), strconv.FormatUint(r.Cost, 10)
	v[5], v[6] = strconv.FormatInt(queuedMs(now, r), 10), h.msg.Reply()
	for i, k := range ownHeaders {
		hdr[k] = v[i : i+1 : i+1]
	}
	h.inFlight, h.worker, h.rank, h.seq = true, d.Worker, d.Rank, d.Seq
	a.inFlight++
	a.d.Keeper.Drop(r.Ref)
	if err := a.d.Handshaker.Send(d.Worker, hdr, h.msg.Data(), r.Ref); err != nil {
		a.log.Warn().Err(err).Str("request_id", r.ID).Str("worker_id", d.Worker).Msg("dispatch send failed")
		a.answer(bus.Result{Token: r.Ref, Worker: d.Worker, Outcome: bus.Refused})
	}
}

func isOwnHeader(k string) bool {
	if len(k) < 9 || !strings.EqualFold(k[:9], "Dispatch-") {
		return false
	}
	for _, o := range ownHeaders {
		if strings.EqualFold(k, o) {
			return true
		}
	}
	return false
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
	if res.Outcome == bus.Accepted {
		r := h.snap
		delete(a.held, res.Token)
		h.rel.Release(1)
		a.d.Metrics.Dispatched(r.Class)
		a.d.Metrics.QueueWait(r.Class, float64(max(0, now.UnixNano()-r.Arrival))/1e9)
		if h.replyTo != "" {
			rank, q := int(h.rank), queuedMs(now, r)
			a.outcome(h.replyTo, bus.OutcomeMsg{RequestID: r.ID, Status: bus.StatusDispatched,
				PolicyClass: a.className(r.Class), WorkerID: h.worker, DPRank: &rank, QueuedMs: &q, Attempt: attempt(h.msg)})
		}
		return
	}
	if res.Outcome == bus.Timeout {
		a.log.Debug().Str("request_id", h.snap.ID).Str("worker_id", h.worker).Msg("dispatch timed out; the request keeps its place")
	}
	if !a.active() {
		a.handBack(res.Token, h)
		return
	}
	a.d.Scheduler.Return(now.UnixNano(), h.snap, h.worker, h.seq)
	// The ack wait last restarted up to half an ack wait plus the dispatch
	// timeout ago: restart it now, so the Keeper's clock is the server's.
	if err := h.msg.InProgress(); err == nil {
		a.d.Metrics.ProgressAck()
	}
	a.d.Keeper.Hold(res.Token, h.msg, now)
}
