package dispatcher

import (
	"fairdispatch/completion"
	"fairdispatch/scheduler"
)

// maxPendingDone bounds the completion records waiting for the actor; beyond
// it a record is dropped and counted (reason "backlog"): a record only corrects
// a cost estimate, and a flood of them must not grow memory without bound.
const maxPendingDone = 65536

// doneRecord is a parsed completion record and the worker it came from.
type doneRecord struct {
	worker string
	rec    completion.Record
}

// CompletionRecord parses a raw completion record on the caller's goroutine
// (the bus.SubscribeDone callback) and delivers it to the actor, which settles
// the dispatch's cost (docs/design.md, Cost settlement). A record that does not
// parse, or that arrives while maxPendingDone wait, is dropped and counted. It
// never blocks.
func (a *Actor) CompletionRecord(token string, data []byte) {
	rec, err := completion.Parse(data)
	if err != nil {
		a.d.Metrics.Settlement("invalid", 0)
		a.log.Debug().Err(err).Str("worker_id", token).Msg("completion record dropped")
		return
	}
	if a.done.len() >= maxPendingDone {
		a.d.Metrics.Settlement("backlog", 0)
		return
	}
	a.done.put(doneRecord{worker: token, rec: rec})
}

// settle applies one completion record, on the actor's goroutine.
func (a *Actor) settle(d doneRecord) {
	res := a.d.Scheduler.Settle(d.worker, scheduler.Completion{
		Seq: d.rec.Seq, RequestID: d.rec.RequestID,
		PrefillTokens: d.rec.PrefillTokens, OutputTokens: d.rec.OutputTokens,
	})
	a.d.Metrics.Settlement(res.Outcome.String(), res.Correction)
	if res.Outcome != scheduler.Settled {
		a.log.Debug().Str("worker_id", d.worker).Str("request_id", d.rec.RequestID).
			Uint64("seq", d.rec.Seq).Str("outcome", res.Outcome.String()).Msg("completion record ignored")
	}
}
