package dispatcher

import (
	"time"

	"fairdispatch/ingest"
	"fairdispatch/metrics"
	"fairdispatch/wire"
)

// Bounds of the cancellation memories (docs/protocol.md, Cancellation).
const (
	// cancelMemoAge is how long a cancelled id, and a dispatch's worker, is
	// remembered.
	cancelMemoAge = 10 * time.Minute
	// maxCancelled bounds the cancelled ids remembered: at most about 4 MB.
	maxCancelled = 100_000
	// maxRunning bounds the dispatches remembered for forwarding.
	maxRunning = 262_144
	// maxPendingCancels bounds the cancellations waiting for the actor;
	// beyond it one is dropped and counted (where="backlog").
	maxPendingCancels = 65_536
)

// runRef is where a request was dispatched: its worker and Dispatch-Seq.
type runRef struct {
	worker string
	seq    uint64
}

// CancelRequest parses a producer's cancellation on <prefix>.cancel (the
// bus.SubscribeCancel callback) on the caller's goroutine and hands its id to
// the actor. A body that does not parse, or one arriving while
// maxPendingCancels wait, is dropped and counted. It never blocks.
func (a *Actor) CancelRequest(data []byte) {
	c, err := wire.ParseCancel(data)
	if err != nil {
		a.d.Metrics.Cancel(metrics.CancelInvalid)
		a.log.Debug().Err(err).Msg("cancellation dropped")
		return
	}
	if a.cancels.len() >= maxPendingCancels {
		a.d.Metrics.Cancel(metrics.CancelBacklog)
		return
	}
	a.cancels.put(c.RequestID)
}

// cancel acts on a cancellation of request id, on the actor's goroutine
// (docs/protocol.md, Cancellation): every dispatcher remembers the id; the
// leader takes a queued request out with no service charged, marks one in a
// handshake, and forwards the cancellation of a running one to its worker.
func (a *Actor) cancel(id string) {
	now := a.cfg.Now()
	a.cancelled.put(now.UnixNano(), id, struct{}{})
	if !a.leading.Load() {
		a.d.Metrics.Cancel(metrics.CancelStandby)
		return
	}
	if seq, ok := a.byID[id]; ok {
		h := a.held[seq]
		switch {
		case h.inFlight:
			h.cancel = true // answered: forwarded if accepted, taken out if not
			a.d.Metrics.Cancel(metrics.CancelSending)
		case !h.dead && h.err == nil && h.snap.Index >= 0:
			a.cancelQueued(now, seq, h)
			a.d.Metrics.Cancel(metrics.CancelQueued)
		default: // being dead-lettered, or parked to be
			a.d.Metrics.Cancel(metrics.CancelRejected)
		}
		return
	}
	if ref, ok := a.running.get(id); ok {
		a.forwardCancel(id, ref)
		a.d.Metrics.Cancel(metrics.CancelRunning)
		return
	}
	a.d.Metrics.Cancel(metrics.CancelUnknown)
}

// cancelQueued takes queued request h out of the scheduler (scheduler.Cancel:
// no service charged), drops its message (+TERM cancelled) and publishes the
// cancelled outcome.
func (a *Actor) cancelQueued(now time.Time, seq uint64, h *held) {
	r := h.snap
	a.d.Scheduler.Cancel(r)
	a.d.Keeper.Drop(seq)
	if err := h.msg.Term(wire.StatusCancelled); err != nil {
		a.log.Warn().Err(err).Str("request_id", r.ID).Msg("drop of a cancelled request")
	}
	a.dropHeld(seq, h)
	h.rel.Release(1)
	a.log.Debug().Str("request_id", r.ID).Msg("queued request cancelled")
	if h.replyTo != "" {
		q := queuedMs(now, r)
		a.outcome(h.replyTo, wire.Outcome{RequestID: r.ID, Status: wire.StatusCancelled, PolicyClass: a.className(r.Class),
			QueuedMs: &q, Attempt: uint64(h.attempt)})
	}
}

// forwardCancel tells the worker running request id to stop it.
func (a *Actor) forwardCancel(id string, ref runRef) {
	if a.d.CancelWorker == nil {
		return
	}
	if err := a.d.CancelWorker(ref.worker, wire.Cancel{RequestID: id, Seq: ref.seq, Reason: wire.CancelReasonCancel}); err != nil {
		a.log.Warn().Err(err).Str("request_id", id).Str("worker_id", ref.worker).Msg("cancellation not forwarded")
	}
}

// cancelledAtAdmission drops a delivery whose id was cancelled before it
// arrived (+TERM cancelled, the cancelled outcome) and reports whether it did.
func (a *Actor) cancelledAtAdmission(now time.Time, dl *ingest.Delivery, id string) bool {
	if a.cancelled.len() == 0 {
		return false
	}
	if _, ok := a.cancelled.get(id); !ok {
		return false
	}
	if err := dl.Msg.Term(wire.StatusCancelled); err != nil {
		a.log.Warn().Err(err).Str("request_id", id).Msg("drop of a cancelled request")
	}
	a.cur.rel.Release(1)
	a.d.Metrics.Cancel(metrics.CancelAdmission)
	a.log.Debug().Str("request_id", id).Msg("request cancelled at admission")
	if r := dl.Headers.ReplyTo; r != "" && !a.protocolSubject(r) {
		q := max(0, now.UnixNano()-dl.Published.UnixNano()) / 1e6
		a.outcome(r, wire.Outcome{RequestID: id, Status: wire.StatusCancelled, QueuedMs: &q, Attempt: uint64(deliveryCount(dl))})
	}
	return true
}

// dropHeld forgets held request h at seq.
func (a *Actor) dropHeld(seq uint64, h *held) {
	delete(a.held, seq)
	if h.snap != nil && a.byID[h.snap.ID] == seq {
		delete(a.byID, h.snap.ID)
	}
}
