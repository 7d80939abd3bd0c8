package workerkit

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// CancelHandler is implemented by a [Handler] that wants to hear when the
// helper ends an accepted request on its own (the reasons of
// [Request.Context]): the helper calls Cancelled once, after it has done what
// the protocol asks, from one of its goroutines, without its locks. It must
// not block. It is the allocation-free alternative to watching
// Request.Context for every request.
type CancelHandler interface {
	Cancelled(r *Request, cause error)
}

// onCancel handles a cancellation from the dispatcher on
// <prefix>.cancel.<id> (docs/protocol.md, Cancellation): every held
// request of that id is ended with ErrCancelled.
func (w *Worker) onCancel(m *nats.Msg) {
	c, err := wire.ParseCancel(m.Data)
	if err != nil {
		w.log.Warn().Err(err).Msg("cancellation dropped")
		return
	}
	preempt := c.Reason == wire.CancelReasonPreempt
	if preempt && !w.cfg.Preempt {
		w.log.Debug().Str("request_id", c.RequestID).Msg("preemption ignored: not declared")
		return
	}
	var hit []*Request
	w.mu.Lock()
	for r := range w.held {
		if r.RequestID == c.RequestID && r.state != stateFinished && (!preempt || c.Seq == 0 || r.dispatchedAs(c.Seq)) {
			hit = append(hit, r)
		}
	}
	w.mu.Unlock()
	for _, r := range hit {
		if preempt {
			w.preempt(r)
			continue
		}
		w.abort(r, fmt.Errorf("%w by the dispatcher", ErrCancelled))
	}
	w.log.Debug().Str("request_id", c.RequestID).Uint64("seq", c.Seq).Int("held", len(hit)).Msg("cancellation")
}

// dispatchedAs reports whether seq is the dispatch sequence of r's first
// dispatch or of one joined to it since (a redelivery to this worker: the
// dispatcher's current dispatch of the request is then the joined one); w.mu
// is held.
func (r *Request) dispatchedAs(seq uint64) bool {
	if r.Seq == seq {
		return true
	}
	for _, j := range r.joined {
		if j.seq == seq {
			return true
		}
	}
	return false
}

// preempt hands r back for a preemption (docs/protocol.md, Preemption) if
// it has written no response chunk: the response closes without an end
// marker, the message gets -NAK (JetStream delivers it again at once) and
// r's context ends with ErrPreempted. After a chunk it does nothing.
func (w *Worker) preempt(r *Request) {
	if p := r.resp; p != nil && !p.yieldTo(ErrPreempted) {
		about(w.log.Debug(), r).Msg("preemption ignored: a response chunk was sent")
		return
	}
	w.abort(r, ErrPreempted)
}

// abort ends r for cause, on the helper's own decision, as docs/protocol.md,
// What a worker does with each answer, says: ErrTaken sends nothing at all;
// ErrCancelled ends a claimed response with status cancelled and sends
// +TERM; ErrStopped hands the request back (-NAK) before its first chunk
// and, after it, ends the response with status failed and sends +TERM; the
// other causes (ErrNoListener, ErrBadResponseSubject) send +TERM. Then
// r's context is cancelled with cause and the handler's Cancelled runs. A
// request already finished is left alone.
func (w *Worker) abort(r *Request, cause error) {
	if errors.Is(cause, ErrCancelled) && r.resp != nil && r.resp.ending() {
		// Its end marker is on its way with the application's status: the
		// producer is told how it ended, and its acknowledgement follows.
		// Cancelling now would contradict both.
		about(w.log.Debug(), r).Msg("cancellation of a request whose response is ending: ignored")
		return
	}
	w.mu.Lock()
	if r.state == stateFinished {
		w.mu.Unlock()
		return
	}
	if r.cause == nil {
		r.cause = cause
	}
	w.mu.Unlock()
	started := false
	if p := r.resp; p != nil {
		switch {
		case errors.Is(cause, ErrCancelled):
			started = p.close(cause, wire.EndCancelled, false)
		case errors.Is(cause, ErrStopped):
			started = p.close(cause, wire.EndFailed, true)
		default:
			started = p.close(cause, "", false)
		}
	}
	var body []byte
	switch {
	case errors.Is(cause, ErrTaken):
	case errors.Is(cause, ErrStopped) && !started, errors.Is(cause, ErrPreempted):
		body = ackNak
	case errors.Is(cause, ErrCancelled):
		body = ackTermCancelled
	default:
		body = ackTerm
	}
	// Released before the context is cancelled, so that a handler that
	// calls Done as soon as its context ends gets ErrFinished, not an
	// acknowledgement that races this one; cancelled after the response is
	// closed, so that Start returns the response's error, not the context's.
	ack, ok := w.release(r, body)
	w.mu.Lock()
	if r.cancel != nil {
		r.cancel(r.cause)
	}
	w.mu.Unlock()
	if !ok {
		return // finished meanwhile by the application
	}
	if body != nil {
		if err := w.acknowledge(r, ack, body, nil); err != nil {
			about(w.log.Error(), r).Err(err).Msg("acknowledgement of an ended request")
		}
	}
	about(w.log.Debug(), r).Err(cause).Msg("request ended by the helper")
	if ch, ok := w.h.(CancelHandler); ok {
		ch.Cancelled(r, cause)
	}
}
