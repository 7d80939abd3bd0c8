package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"

	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

// maxPendingDone bounds the completion records waiting for the actor; beyond
// it a record is dropped and counted (reason "backlog"): a record only corrects
// a cost estimate, and a flood of them must not grow memory without bound.
const maxPendingDone = 65536

// doneRecord is a parsed completion record and the worker it came from.
type doneRecord struct {
	worker string
	rec    wire.Completion
}

// CompletionRecord parses a raw completion record on the caller's goroutine
// (the bus.SubscribeDone callback) and delivers it to the actor, which settles
// the dispatch's cost (docs/design.md, Cost settlement). A record that does not
// parse, or that arrives while maxPendingDone wait, is dropped and counted. It
// never blocks.
func (a *Actor) CompletionRecord(token string, data []byte) {
	rec, err := parseCompletion(data)
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
		Cancelled: d.rec.Status == wire.StatusCancelled,
	})
	a.d.Metrics.Settlement(res.Outcome.String(), res.Correction)
	if id := d.rec.RequestID; res.Outcome == scheduler.Settled && id != "" {
		if ref, ok := a.running.get(id); ok && ref.worker == d.worker && ref.seq == d.rec.Seq {
			a.running.del(id) // it finished: nothing to forward a cancellation to
		}
	}
	if res.Outcome != scheduler.Settled {
		a.log.Debug().Str("worker_id", d.worker).Str("request_id", d.rec.RequestID).
			Uint64("seq", d.rec.Seq).Str("outcome", res.Outcome.String()).Msg("completion record ignored")
	}
}

// maxCompletionBytes bounds a completion record's JSON body; a longer one is
// refused unparsed.
const maxCompletionBytes = 4096

// maxCompletionTokens bounds prefill_tokens and output_tokens: 2^40, as every
// token count of the protocol.
const maxCompletionTokens = 1 << 40

// errCompletion is wrapped by every error of parseCompletion.
var errCompletion = errors.New("invalid completion record")

// parseCompletion decodes and checks a completion record (docs/protocol.md,
// Completion records): a JSON object at most maxCompletionBytes long, seq > 0,
// token counts at most 2^40, status ok, failed or cancelled (absent reads as
// ok). Only the fields the dispatcher uses are read: the others are ignored
// as the protocol says, whatever their type (a worker's finished_at as a
// number must not cost its dispatch the settlement); the result carries the
// ones read.
func parseCompletion(data []byte) (wire.Completion, error) {
	var c wire.Completion
	if len(data) > maxCompletionBytes {
		return c, fmt.Errorf("%w: %d bytes, more than %d", errCompletion, len(data), maxCompletionBytes)
	}
	var r struct {
		RequestID     string `json:"request_id"`
		Seq           uint64 `json:"seq"`
		PrefillTokens uint64 `json:"prefill_tokens"`
		OutputTokens  uint64 `json:"output_tokens"`
		Status        string `json:"status"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return c, fmt.Errorf("%w: %v", errCompletion, err)
	}
	c.RequestID, c.Seq, c.PrefillTokens, c.OutputTokens, c.Status = r.RequestID, r.Seq, r.PrefillTokens, r.OutputTokens, r.Status
	switch {
	case c.Seq == 0:
		return c, fmt.Errorf("%w: seq missing or 0", errCompletion)
	case c.PrefillTokens > maxCompletionTokens || c.OutputTokens > maxCompletionTokens:
		return c, fmt.Errorf("%w: token count above 2^40", errCompletion)
	}
	switch c.Status {
	case "":
		c.Status = wire.StatusOK
	case wire.StatusOK, wire.StatusFailed, wire.StatusCancelled:
	default:
		return c, fmt.Errorf("%w: status %q, want ok, failed or cancelled", errCompletion, c.Status)
	}
	return c, nil
}
