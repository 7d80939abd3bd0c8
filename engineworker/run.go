package engineworker

// One request's life at the engine (docs/protocol.md, Responses and What a
// worker does with each answer): the claim, the HTTP request, each chunk of
// the engine's answer written to the response in order, the end marker with
// the engine's usage, the acknowledgement and the completion record with
// the real cost. A cancellation, a caller gone or a hung engine closes the
// HTTP stream, which aborts the request in the engine.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// endTimeout bounds the end marker and acknowledgement of one request.
const endTimeout = 30 * time.Second

// job is one request at the engine.
type job struct {
	r        *workerkit.Request
	resp     *workerkit.Response // nil: the producer asked for no response
	rank     int                 // index in Worker.loads
	uncached uint64              // Dispatch-Cost (else the ISL): its prefill load
	prefill  bool                // not yet past its first chunk; guarded by Worker.mu
	chunks   int                 // chunks of the engine's answer so far; guarded by Worker.mu
	cancel   context.CancelCauseFunc
}

func (w *Worker) run(ctx context.Context, j *job) {
	defer j.cancel(nil)
	r := j.r
	if j.resp != nil {
		// The claim, sent by the helper on acceptance: nothing goes to the
		// engine before the producer answered go.
		if err := j.resp.Start(ctx); err != nil {
			w.leave(j)
			if r.Cause() == nil && isOwnCause(context.Cause(ctx)) {
				// The worker stops it (the engine turned unhealthy)
				// before the producer answered: nothing ran, so it runs
				// elsewhere. Left alone, the helper would open the
				// response at the producer's go with nobody to run it.
				w.handBack(j, context.Cause(ctx))
				return
			}
			w.ended(ctx, j, Result{}, false)
			return
		}
	}
	rank := -1
	if w.cfg.Worker.DPSize > 1 || w.cfg.Worker.DPStart > 0 {
		rank = r.DPRank
	}
	api := workerkit.HeaderValue(r.Header, wire.HeaderAPI)
	res, err := Call(ctx, w.http, w.cfg.EngineURL, api, r.Data, rank, func(chunk []byte, whole bool) error {
		w.firstChunk(j)
		switch {
		case j.resp == nil:
			return nil // no response asked: the output is not wanted
		case whole:
			return j.resp.WriteWhole(chunk) // in pieces when larger than a chunk may be
		}
		return j.resp.Write(chunk)
	})
	w.leave(j)
	var ee *EngineError
	switch {
	case err == nil:
		w.answered(j, res)
	case r.Cause() != nil || (ctx.Err() != nil && !isOwnCause(context.Cause(ctx))):
		w.ended(ctx, j, res, true)
	case ctx.Err() != nil:
		w.engineFailed(j, res, context.Cause(ctx))
	case errors.Is(err, ErrBadRequest), errors.As(err, &ee) && ee.Status < 500:
		w.refused(j, err)
	case errors.Is(err, nats.ErrMaxPayload):
		// A streaming chunk larger than the server takes: running the
		// request again would make it again.
		w.fail(j, res, err, false)
	default:
		w.engineFailed(j, res, err)
	}
}

// isOwnCause reports whether cause is the worker's own reason to stop a
// request (not the helper's).
func isOwnCause(cause error) bool {
	return errors.Is(cause, errUnhealthy) || errors.Is(cause, errShutdown)
}

// firstChunk counts a chunk of j and moves j past its prefill in the load.
func (w *Worker) firstChunk(j *job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j.chunks++
	if j.prefill {
		j.prefill = false
		w.loads[j.rank].prefillTokens -= j.uncached
		w.setLoadLocked(j.rank)
	}
}

// leave takes j out of the load.
func (w *Worker) leave(j *job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.jobs[j.r]; !ok {
		return
	}
	delete(w.jobs, j.r)
	w.loads[j.rank].active--
	if j.prefill {
		w.loads[j.rank].prefillTokens -= j.uncached
		j.prefill = false
	}
	w.setLoadLocked(j.rank)
}

// sent returns the chunks that reached the producer: 0 when it asked for no
// response (nothing of the engine's answer reaches anyone, so the request
// can always run again).
func (w *Worker) sent(j *job) int {
	if j.resp == nil {
		return 0
	}
	return int(j.resp.Chunks())
}

// cost returns the tokens j used as far as the worker knows: the engine's
// usage when it sent one, else the uncached estimate once a chunk showed
// the prefill done, and a token per chunk.
func (w *Worker) cost(j *job, res Result) (prefill, output, cached uint64) {
	if res.Usage.Reported {
		return res.Usage.Uncached(), res.Usage.CompletionTokens, res.Usage.CachedTokens
	}
	w.mu.Lock()
	n := j.chunks
	w.mu.Unlock()
	if n == 0 {
		return 0, 0, 0
	}
	return j.uncached, uint64(n), 0
}

// usage is the end marker's usage: the engine's, nil when it sent none.
func usage(res Result) *wire.Usage {
	if !res.Usage.Reported {
		return nil
	}
	return &wire.Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, CachedTokens: res.Usage.CachedTokens}
}

// answered finishes a request the engine answered in full: the end marker
// with the usage, the confirmed acknowledgement, then the record.
func (w *Worker) answered(j *job, res Result) {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	var err error
	if j.resp != nil {
		err = j.resp.End(ctx, wire.ResponseEnd{Status: wire.EndOK, FinishReason: res.FinishReason, Usage: usage(res)})
	} else {
		err = j.r.DoneConfirmed(ctx)
	}
	if errors.Is(err, workerkit.ErrFinished) {
		// The helper ended it meanwhile (a cancellation that came late).
		w.ended(ctx, j, res, false)
		return
	}
	if err != nil {
		w.log.Warn().Err(err).Str("request_id", j.r.RequestID).Msg("acknowledgement unconfirmed; the request may be redelivered")
	}
	p, o, c := w.cost(j, res)
	w.record(j, p, o, c, wire.StatusOK)
	w.count(func(s *Stats) { s.Done++ })
}

// refused fails a request the engine refused (a 4xx) or that cannot be
// sent to it: it is not run again, and the record refunds its charge.
func (w *Worker) refused(j *job, err error) {
	w.log.Warn().Err(err).Str("request_id", j.r.RequestID).Msg("request refused by the engine")
	w.fail(j, Result{}, err, true)
}

// engineFailed handles a request the engine could not finish (it hung, its
// connection broke, it answered 5xx) or that the worker stops: before its
// first chunk reached the producer it is handed back to run elsewhere,
// invisible to the caller; after, the response ends failed.
func (w *Worker) engineFailed(j *job, res Result, cause error) {
	if w.sent(j) == 0 && w.handBack(j, cause) {
		w.count(func(s *Stats) { s.Aborted++ })
		return
	}
	w.log.Warn().Err(cause).Str("request_id", j.r.RequestID).Int("chunks", w.sent(j)).Msg("request failed after its first chunk")
	w.count(func(s *Stats) { s.Aborted++ })
	w.fail(j, res, cause, false)
}

// handBack hands j back (-NAK) before its first chunk, and reports whether
// it could: after a chunk it cannot.
func (w *Worker) handBack(j *job, cause error) bool {
	if err := j.r.Nak(); err != nil && !errors.Is(err, workerkit.ErrFinished) {
		return false
	}
	w.log.Info().Err(cause).Str("request_id", j.r.RequestID).Msg("request handed back before its first chunk")
	w.count(func(s *Stats) { s.HandedBack++ })
	return true
}

// fail ends j with status failed (+ACK after the end marker; +TERM without
// a response): the request is not run again; the record settles what it used.
// refused: the engine refused the request as it is (the end marker says so).
func (w *Worker) fail(j *job, res Result, cause error, refused bool) {
	ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	var err error
	if j.resp != nil {
		err = j.resp.End(ctx, wire.ResponseEnd{Status: wire.EndFailed, FinishReason: res.FinishReason, Usage: usage(res),
			Error: errorText(cause), Refused: refused})
	} else {
		err = j.r.Term()
	}
	if errors.Is(err, workerkit.ErrFinished) {
		w.ended(ctx, j, res, false)
		return
	}
	p, o, c := w.cost(j, res)
	w.record(j, p, o, c, wire.StatusFailed)
	w.count(func(s *Stats) { s.Failed++ })
}

// errorText is the end marker's error for cause, within its bound: an
// engine's answer gives its message, at the top level (older vLLM, SGLang)
// or in an OpenAI error object ({"error": {"message": ...}}, newer vLLM).
func errorText(cause error) string {
	var ee *EngineError
	s := cause.Error()
	if errors.As(cause, &ee) {
		var v struct {
			Message string `json:"message"`
			Error   struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(ee.Body, &v) // a field of another type leaves the rest decoded
		if m := cmp.Or(v.Message, v.Error.Message); m != "" {
			s = fmt.Sprintf("engine answered %d: %s", ee.Status, m)
		}
	}
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}

// ended settles a request the helper ended on its own (cancelled, nobody
// listening, taken over, stopped): the helper did the protocol's part, the
// engine request is closed (aborted when it was running). The record
// says what it used, status cancelled; none for a request another
// execution took over, or that Stop handed back before its first chunk.
func (w *Worker) ended(ctx context.Context, j *job, res Result, atEngine bool) {
	cause := j.r.Cause()
	if cause == nil {
		cause = context.Cause(ctx)
	}
	w.count(func(s *Stats) {
		s.Cancelled++
		if atEngine {
			s.Aborted++
		}
	})
	w.log.Debug().Err(cause).Str("request_id", j.r.RequestID).Bool("at_engine", atEngine).Msg("request ended by the helper")
	sent := w.sent(j)
	switch {
	case errors.Is(cause, workerkit.ErrTaken):
		return // the execution that took it over settles it
	case errors.Is(cause, workerkit.ErrStopped) && sent == 0:
		return // handed back: it runs again
	case errors.Is(cause, workerkit.ErrStopped):
		p, o, c := w.cost(j, res)
		w.record(j, p, o, c, wire.StatusFailed)
		return
	}
	p, o, c := w.cost(j, res)
	w.record(j, p, o, c, wire.StatusCancelled)
}

// record publishes j's completion record (docs/protocol.md, Completion
// records) with the tokens the engine computed, and one of 0 tokens for each
// further dispatch the helper joined to the execution
// (workerkit.Request.PublishCompletion).
func (w *Worker) record(j *job, prefill, output, cached uint64, status string) {
	c := j.r.Completion(prefill, output, status == wire.StatusFailed)
	c.Status, c.CachedTokens = status, cached
	if err := j.r.PublishCompletion(c); err != nil {
		w.log.Error().Err(err).Str("request_id", j.r.RequestID).Msg("completion record")
	}
}
