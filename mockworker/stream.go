package mockworker

import (
	"context"
	"errors"
	"strings"
	"time"

	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// stream is the response of a job whose producer asked for one
// (docs/protocol.md, Responses): one chunk per output token, written as the
// engine produces it, then the end marker.
type stream struct {
	resp    *workerkit.Response
	api     *apiRequest // nil: not OpenAI-shaped, a chunk is the token's text
	claimed bool        // the claim was answered go (guarded by Worker.mu)
	written int         // tokens written as chunks (guarded by Worker.mu)
}

// handler is the helper's Handler: Offer admits, Cancelled stops a job the
// helper ended on its own.
type handler struct{ m *Worker }

func (h handler) Offer(r *workerkit.Request) bool { return h.m.offer(r) }

// Cancelled removes r's job from the engine (the helper has ended the
// request: cancelled, nobody listening, taken, or stopping) and publishes
// its completion record with status cancelled and the tokens computed.
func (h handler) Cancelled(r *workerkit.Request, cause error) {
	m := h.m
	now := time.Now()
	m.mu.Lock()
	j := m.jobOf(r)
	if j == nil || !m.eng.remove(j, now) {
		m.mu.Unlock()
		return // finished already, or never admitted
	}
	delete(m.streams, j)
	m.stats.Cancelled++
	if errors.Is(cause, workerkit.ErrPreempted) {
		m.stats.Preempted++
	}
	m.setLoadLocked(j.rank)
	produced := m.eng.produced(j, now)
	prefilled := j.phase == phaseDecode || (j.phase == phasePrefill && !now.Before(j.prefillEnd))
	m.mu.Unlock()
	m.kick()
	m.log.Debug().Str("request_id", r.RequestID).Err(cause).Int("tokens", produced).Msg("request stopped")
	if m.cfg.NoCompletions || errors.Is(cause, workerkit.ErrTaken) {
		return // the execution that took it over reports it
	}
	prefill := uint64(0)
	if prefilled {
		prefill = j.uncached
	}
	c := r.Completion(prefill, uint64(produced), false)
	c.Status = wire.StatusCancelled
	c.DPRank, c.ReceivedAt, c.StartedAt, c.CachedTokens = j.rank, j.receivedAt, j.startedAt, j.cached
	if err := r.PublishCompletion(c); err != nil {
		m.log.Error().Err(err).Str("request_id", r.RequestID).Msg("publish completion")
	}
}

// jobOf finds r's job in the engine; m.mu is held. O(jobs of its rank).
func (m *Worker) jobOf(r *workerkit.Request) *job {
	if m.bat != nil {
		return m.batJobs[r]
	}
	rs := m.eng.rank(r.DPRank)
	for _, j := range rs.running {
		if j.req == r {
			return j
		}
	}
	for _, j := range rs.waiting {
		if j.req == r {
			return j
		}
	}
	return nil
}

// kick wakes the simulation goroutine.
func (m *Worker) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// openStream sets up j's response, when its producer asked for one, and
// waits for the claim off the caller's goroutine; m.mu is held.
func (m *Worker) openStream(j *job, api *apiRequest) {
	resp := j.req.Response()
	if resp == nil {
		return
	}
	st := &stream{resp: resp, api: api}
	m.streams[j] = st
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), m.ackWait)
		defer cancel()
		if err := resp.Start(ctx); err != nil {
			return // the helper ended the request; Cancelled removes the job
		}
		m.mu.Lock()
		st.claimed = true
		bad := api != nil && api.err != ""
		if bad && m.eng.remove(j, time.Now()) {
			delete(m.streams, j)
			m.setLoadLocked(j.rank)
		} else {
			bad = false
		}
		m.mu.Unlock()
		m.kick()
		if bad {
			if err := resp.End(ctx, wire.ResponseEnd{Status: wire.EndFailed, Error: api.err, Refused: true}); err != nil {
				m.log.Warn().Err(err).Str("request_id", j.id).Msg("end of a response that cannot be answered")
			}
		}
	}()
}

// writeTokens writes the chunks of every claimed stream's tokens produced
// by now and returns when the next token of any stream comes out (zero:
// none pending); m.mu is held. Writes are publishes: they do not block.
func (m *Worker) writeTokens(now time.Time) (next time.Time) {
	for j, st := range m.streams {
		if !st.claimed {
			continue
		}
		for n := m.eng.produced(j, now); st.written < n; {
			st.written++
			if st.api == nil || st.api.stream {
				if err := st.resp.Write(m.chunk(j, st, st.written)); err != nil {
					break // ended by the helper: Cancelled removes the job
				}
			}
		}
		if st.written < j.out {
			if at, ok := m.eng.tokenAt(j, st.written+1); ok && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	return next
}

// chunk returns the chunk of token k of j's stream.
func (m *Worker) chunk(j *job, st *stream, k int) []byte {
	if st.api == nil {
		return []byte(strings.TrimPrefix(tokenText(k), " "))
	}
	return st.api.streamChunk(k, j.out, st.api.finishReason())
}

// finishStream writes what is left of a finished job's response (its last
// tokens; the usage chunk or the whole object of an OpenAI request), then
// ends it and acknowledges the request, with the completion record c ahead
// of each attempt (none with NoCompletions). It runs on an ack goroutine.
func (m *Worker) finishStream(j *job, st *stream, c wire.Completion) {
	r := j.req
	ctx, cancel := context.WithTimeout(context.Background(), m.ackWait)
	defer cancel()
	if err := st.resp.Start(ctx); err != nil {
		return // the helper ended it
	}
	if st.api != nil && st.api.err != "" { // finished before openStream could stop it
		if err := st.resp.End(ctx, wire.ResponseEnd{Status: wire.EndFailed, Error: st.api.err, Refused: true}); err != nil {
			m.log.Warn().Err(err).Str("request_id", r.RequestID).Msg("end of a response that cannot be answered")
		}
		return
	}
	m.mu.Lock()
	for st.written < j.out {
		st.written++
		if st.api == nil || st.api.stream {
			_ = st.resp.Write(m.chunk(j, st, st.written))
		}
	}
	m.mu.Unlock()
	u := wire.Usage{PromptTokens: max(r.ISL, j.uncached+j.cached), CompletionTokens: uint64(j.out), CachedTokens: j.cached}
	switch {
	case st.api != nil && !st.api.stream:
		_ = st.resp.WriteWhole(st.api.whole(j.out, st.api.finishReason(), u)) // in pieces when larger than a chunk may be
	case st.api != nil && st.api.includeUsage:
		_ = st.resp.Write(st.api.usageChunk(u))
	}
	err := st.resp.EndAfter(ctx, wire.ResponseEnd{Status: wire.EndOK, FinishReason: st.api.finishReason(), Usage: &u},
		m.afterAck(r, c))
	switch {
	case errors.Is(err, workerkit.ErrFinished):
		m.log.Debug().Err(err).Str("request_id", r.RequestID).Msg("response ended by the helper")
	case err != nil:
		m.mu.Lock()
		m.streamAckFail++
		m.mu.Unlock()
		m.log.Error().Err(err).Str("request_id", r.RequestID).Msg("end of response not confirmed; it may be redelivered")
	}
}

// earlier returns the earlier of two wake-up times, either zero for none.
func earlier(a time.Time, aok bool, b time.Time) (time.Time, bool) {
	if b.IsZero() {
		return a, aok
	}
	if !aok || b.Before(a) {
		return b, true
	}
	return a, true
}
