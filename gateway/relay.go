package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/internal/openai"
	"fairdispatch/wire"
)

// exchange relays one call's response to its client.
type exchange struct {
	s       *Server
	w       http.ResponseWriter
	call    *caller.Call
	rt      *route
	arrived time.Time
	log     zerolog.Logger
	heard   bool // any event yet (a deduplicated call attaches only if so)
	chunks  int
}

// recv is call.Recv, bounded by the attach wait while a deduplicated call
// has heard nothing and follows no execution (one that attached to an
// execution still in its prefill waits for its chunks as any call does).
func (x *exchange) recv(ctx context.Context) (caller.Event, error) {
	if x.heard || !x.call.Duplicate() {
		ev, err := x.call.Recv(ctx)
		x.heard = x.heard || err == nil
		return ev, err
	}
	actx, cancel := context.WithTimeout(ctx, x.s.opt.AttachWait)
	defer cancel()
	ev, err := x.call.Recv(actx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		if !x.call.Attached() {
			return ev, errDuplicate
		}
		ev, err = x.call.Recv(ctx)
	}
	x.heard = err == nil
	return ev, err
}

// errDuplicate: a deduplicated retry heard nothing of the first attempt.
var errDuplicate = errors.New("duplicate")

// failure maps Recv's error to an answer; nil when the client went away.
func (x *exchange) failure(ctx context.Context, err error) *apiError {
	switch {
	case errors.Is(err, errDuplicate):
		return &apiError{status: 409, typ: typeConflict, code: "duplicate_request", noRetry: true,
			msg: "a request with this Idempotency-Key was accepted before and is finished, cancelled, answered elsewhere or not started within the attach wait; it is not run again (send a new key to run it again)"}
	case ctx.Err() != nil && x.clientGone():
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return x.spent(&apiError{status: 504, typ: typeTimeout, code: "request_timeout", msg: "no answer within the gateway's request timeout"})
	}
	var br *caller.BrokenError
	if errors.As(err, &br) {
		x.s.m.broken.Inc()
	}
	return x.spent(fromCall(err))
}

// spent marks an answer the clients would retry (429, 5xx) as not to be
// retried when the request carries an Idempotency-Key: it is stored under
// its id for the stream's duplicate window, so a retry with the same key
// would only wait out --attach-wait for a 409. The client learns the real
// failure at once instead, and that a new key runs the request again.
func (x *exchange) spent(e *apiError) *apiError {
	if x.rt.idem == "" || e.noRetry || (e.status != 429 && e.status < 500) {
		return e
	}
	e.noRetry, e.retryAfter = true, 0
	e.msg += "; the request was stored under this Idempotency-Key, so a retry with the same key does not run it: retry with a new key"
	return e
}

func (x *exchange) clientGone() bool {
	return x.rt.ctxDone()
}

// event books a dispatched outcome or the first chunk in the metrics.
func (x *exchange) event(ev caller.Event) {
	switch ev.Kind {
	case caller.EventDispatched:
		if ev.Outcome.QueuedMs != nil {
			x.s.m.queueWait.WithLabelValues(x.rt.class).Observe(float64(*ev.Outcome.QueuedMs) / 1000)
		}
	case caller.EventChunk:
		if x.chunks == 0 {
			x.s.m.since(x.s.m.ttfc, x.rt.class, x.arrived)
		}
		x.chunks++
	}
}

// usage books a response's usage: the end record's, else the body's.
func (x *exchange) usage(end *wire.ResponseEnd, u *openai.Usage) {
	var prompt, cached, completion uint64
	switch {
	case end != nil && end.Usage != nil:
		prompt, cached, completion = end.Usage.PromptTokens, end.Usage.CachedTokens, end.Usage.CompletionTokens
	case u != nil:
		prompt, cached, completion = u.PromptTokens, u.Cached(), u.CompletionTokens
	default:
		return
	}
	t, c := x.rt.t.Name, x.rt.class
	x.s.m.tokens.WithLabelValues(t, c, "prompt").Add(float64(prompt))
	x.s.m.tokens.WithLabelValues(t, c, "cached").Add(float64(cached))
	x.s.m.tokens.WithLabelValues(t, c, "completion").Add(float64(completion))
}

// whole relays a non-streaming response: the chunks (the engine's whole
// response, in one chunk or, when it is larger than a chunk may be, in
// several) joined as one JSON body once the end says ok.
func (x *exchange) whole(ctx context.Context) int {
	var body []byte
	for {
		ev, err := x.recv(ctx)
		if err != nil {
			e := x.failure(ctx, err)
			if e == nil {
				x.s.m.clientGone.Inc()
				return 0
			}
			e.write(x.w)
			return e.status
		}
		x.event(ev)
		switch ev.Kind {
		case caller.EventChunk:
			body = append(body, ev.Data...)
		case caller.EventEnd:
			if ev.End.Status != wire.EndOK {
				e := x.spent(endError(ev.End))
				e.write(x.w)
				return e.status
			}
			var u struct {
				Usage *openai.Usage `json:"usage"`
			}
			_ = json.Unmarshal(body, &u)
			x.usage(ev.End, u.Usage)
			body = x.rt.p.rewriteModel(body)
			x.w.Header().Set("Content-Type", "application/json")
			// As each write of a stream: a client that stops reading a large
			// answer is dropped, not held with its tenant's slot for ever.
			_ = http.NewResponseController(x.w).SetWriteDeadline(time.Now().Add(x.s.opt.WriteTimeout))
			x.w.WriteHeader(http.StatusOK)
			_, _ = x.w.Write(body)
			return http.StatusOK
		}
	}
}

// endError is the answer for an end record whose status is not ok.
func endError(end *wire.ResponseEnd) *apiError {
	msg := end.Error
	if msg == "" {
		msg = "the worker ended the response with status " + end.Status
	}
	switch {
	case end.Status == wire.EndCancelled:
		// Not retried: a client's retry would run again what an operator or
		// another producer cancelled.
		return &apiError{status: 500, typ: typeServer, code: "cancelled", msg: msg, noRetry: true}
	case end.Refused:
		// Not run again, and clients do not retry a 400: a request the
		// engine refuses as it is would be refused each time.
		return &apiError{status: 400, typ: typeInvalidRequest, code: "engine_refused", msg: msg}
	}
	return &apiError{status: 500, typ: typeServer, code: "engine_error", msg: msg}
}

var (
	sseData = []byte("data: ")
	sseEnd  = []byte("\n\n")
	sseDone = []byte("data: [DONE]\n\n")
)

// stream relays a streaming response as server-sent events: each chunk as
// it arrives, the usage chunk only when the client asked for it
// (stream_options.include_usage), then data: [DONE]. Until the first chunk
// an error is an HTTP status; after it, an error event
// (data: {"error":{...}}), which the official clients raise.
func (x *exchange) stream(ctx context.Context) int {
	rc := http.NewResponseController(x.w)
	// Each write has its own deadline (net/http clears it after the
	// request, so a kept-alive connection's next request starts afresh).
	started := false
	start := func() {
		h := x.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		x.w.WriteHeader(http.StatusOK)
		started = true
	}
	// write writes parts and flushes them unless more events are at hand
	// (the last chunk, the usage chunk and the end often come together:
	// one flush, one syscall, for all of them). What it leaves unflushed
	// is flushed before the loop waits for the next event (an event that
	// writes nothing, a dispatched outcome or a usage chunk the client did
	// not ask for, must not hold a chunk back).
	unflushed := false
	write := func(parts ...[]byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(x.s.opt.WriteTimeout))
		for _, p := range parts {
			if _, err := x.w.Write(p); err != nil {
				return false
			}
		}
		if x.call.Buffered() > 0 {
			unflushed = true
			return true
		}
		unflushed = false
		return rc.Flush() == nil
	}
	gone := func() int {
		x.s.m.clientGone.Inc()
		x.log.Debug().Int("chunks", x.chunks).Msg("client went away; request cancelled")
		return http.StatusOK
	}
	var lastUsage *openai.Usage
	for {
		if unflushed && x.call.Buffered() == 0 {
			unflushed = false
			if rc.Flush() != nil {
				return gone()
			}
		}
		ev, err := x.recv(ctx)
		if err != nil {
			e := x.failure(ctx, err)
			switch {
			case e == nil && !started:
				x.s.m.clientGone.Inc()
				return 0
			case e == nil:
				return gone()
			case !started:
				e.write(x.w)
				return e.status
			}
			x.log.Warn().Err(err).Int("chunks", x.chunks).Msg("stream ended with an error event")
			write(sseData, e.body(), sseEnd)
			return http.StatusOK
		}
		x.event(ev)
		switch ev.Kind {
		case caller.EventChunk:
			data := ev.Data
			if bytes.Contains(data, []byte(`"usage"`)) {
				var c struct {
					Choices []json.RawMessage `json:"choices"`
					Usage   *openai.Usage     `json:"usage"`
				}
				if json.Unmarshal(data, &c) == nil && c.Usage != nil {
					lastUsage = c.Usage
					if len(c.Choices) == 0 && !x.rt.req.includeUsage {
						continue // the usage chunk the gateway asked for, not the client
					}
				}
			}
			if !started {
				start()
			}
			if !write(sseData, x.rt.p.rewriteModel(data), sseEnd) {
				return gone()
			}
		case caller.EventEnd:
			x.usage(ev.End, lastUsage)
			if ev.End.Status != wire.EndOK {
				e := x.spent(endError(ev.End))
				if !started {
					e.write(x.w)
					return e.status
				}
				write(sseData, e.body(), sseEnd)
				return http.StatusOK
			}
			if !started {
				start()
			}
			if !write(sseDone) {
				return gone()
			}
			return http.StatusOK
		}
	}
}

// rewriteModel puts the client's model name into a response object whose
// engine model name differs.
func (p *pool) rewriteModel(data []byte) []byte {
	if p.model.EngineModel == p.model.Name {
		return data
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(data, &f) != nil || f["model"] == nil {
		return data
	}
	f["model"], _ = json.Marshal(p.model.Name)
	out, err := wire.Marshal(f)
	if err != nil {
		return data
	}
	return out
}
