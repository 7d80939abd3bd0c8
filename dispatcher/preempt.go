package dispatcher

import (
	"time"

	"fairdispatch/wire"
)

// preempt sends the preemptions the scheduler decides at now
// (scheduler.Preempt, docs/design.md, Preemption): one cancellation with
// reason preempt to each chosen worker, on <prefix>.cancel.<worker_id>. The
// worker hands the request back (-NAK) or, once it has sent a response
// chunk, ignores the ask; the stream delivers a handed-back request again
// and the scheduler puts it at the head of its lane. Only the leader
// preempts, and not while disconnected.
func (a *Actor) preempt(now time.Time) {
	if !a.active() || !a.connected {
		return
	}
	a.preempts = a.d.Scheduler.Preempt(now.UnixNano(), a.preempts[:0])
	for _, p := range a.preempts {
		a.d.Metrics.Preempted(a.className(p.Class), "asked")
		if a.d.CancelWorker == nil {
			continue
		}
		if err := a.d.CancelWorker(p.Worker, wire.Cancel{RequestID: p.RequestID, Seq: p.Seq, Reason: wire.CancelReasonPreempt}); err != nil {
			a.log.Warn().Err(err).Str("request_id", p.RequestID).Str("worker_id", p.Worker).Msg("preemption not sent")
			continue
		}
		a.log.Debug().Str("request_id", p.RequestID).Str("worker_id", p.Worker).Uint64("seq", p.Seq).
			Str("for_class", a.className(p.For)).Int64("waited_ms", p.Waited/1e6).Msg("preemption asked")
	}
	clear(a.preempts)
}
