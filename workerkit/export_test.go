package workerkit

import (
	"context"
	"time"

	"fairdispatch/wire"
)

// HoldForTest makes w hold a request with id and Dispatch-Ack ack, as if
// dispatched and accepted, without a dispatch (benchmarks of the
// acknowledgement path).
func HoldForTest(w *Worker, id, ack string, ackWait time.Duration) *Request {
	r := &Request{RequestID: id, Ack: ack, AckWait: ackWait, w: w, ReceivedAt: time.Now()}
	w.mu.Lock()
	defer w.mu.Unlock()
	r.state = stateHeld
	w.held[r] = struct{}{}
	w.running[id] = r
	return r
}

// ObserveAcks makes w's acker tell f each confirmation's time since its
// first attempt; f runs under the acker's lock.
func ObserveAcks(w *Worker, f func(time.Duration)) {
	w.mu.Lock()
	a := w.ack
	w.mu.Unlock()
	a.mu.Lock()
	a.observe = f
	a.mu.Unlock()
}

// AwaitingFirstProgress returns the number of accepted requests waiting for
// their first +WPI (the fresh list of firstProgressLoop).
func AwaitingFirstProgress(w *Worker) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.fresh)
}

// AckRetriesPending returns the acknowledgements waiting in w's acker for
// their next attempt (a.retry): after a timeout, until they are due and the
// connection is up.
func AckRetriesPending(w *Worker) int {
	w.mu.Lock()
	a := w.ack
	w.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.retry)
}

// EndMarkerForTest runs the first half of Response.End: the end marker, up
// to its answer, the request still held.
func EndMarkerForTest(p *Response, ctx context.Context, e wire.ResponseEnd) error {
	return p.end(ctx, e)
}

// AckAfterEndForTest runs the second half of Response.End: the confirmed
// +ACK that releases the request.
func AckAfterEndForTest(p *Response, ctx context.Context) error {
	return p.r.finishConfirmed(ctx, ackAck, false, nil)
}
