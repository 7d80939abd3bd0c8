package workerkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// JetStream acknowledgement bodies sent to a request's Dispatch-Ack subject.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
	// ackTermCancelled drops a cancelled request; JetStream's terminated
	// advisory carries the reason.
	ackTermCancelled = []byte("+TERM cancelled")
)

// ErrFinished is returned by a second Done, Nak or Term of one request.
var ErrFinished = errors.New("worker: request already finished")

// HeaderValue returns the first value of header name in h, matching the name
// exactly first and then case-insensitively (wire.HeaderValue). It returns ""
// when absent.
func HeaderValue(h nats.Header, name string) string { return wire.HeaderValue(h, name) }

// Request is one dispatched request, as parsed from the headers of docs/protocol.md, Dispatch handshake.
// Numeric headers that are absent or malformed read as 0 (DPRank as the
// worker's DPStart); HeaderErrors lists the malformed ones.
type Request struct {
	// RequestID is Dispatch-Request-Id.
	RequestID string
	// Class is Dispatch-Class, the physical policy class.
	Class string
	// DPRank is Dispatch-DP-Rank, the rank the dispatcher chose.
	DPRank int
	// Seq is Dispatch-Seq, the worker's dispatch sequence number (docs/protocol.md, Load report).
	Seq uint64
	// Cost is Dispatch-Cost, the scheduling cost in uncached tokens.
	Cost uint64
	// QueuedMs is Dispatch-Queued-Ms, the time the request spent queued, in ms.
	QueuedMs uint64
	// ISL is Dispatch-ISL-Tokens, the raw input sequence length in tokens.
	ISL uint64
	// FairnessKey is Dispatch-Fairness-Key, forwarded from the producer; "" when
	// it had none. It goes back in the completion record.
	FairnessKey string
	// Ack is Dispatch-Ack, the JetStream acknowledgement subject; "" when absent,
	// in which case Done, Nak and Term send nothing.
	Ack string
	// AckWait is Dispatch-Ack-Wait-Ms, the dispatcher's ack wait; 0 when the
	// header is absent (an older dispatcher) or malformed, in which case the
	// helper keeps the request alive by Config.AckWait.
	AckWait time.Duration
	// Header is the message's full header, as received: in the compact form
	// (Compact), the producer's headers the frame carries, without the
	// Dispatch-* headers the dispatcher sets in the header form. Do not
	// modify it.
	Header nats.Header
	// Compact is set when the dispatch came in the compact form
	// (docs/protocol.md, Compact dispatch form), which carries every dispatch
	// field.
	Compact bool
	// Data is the request body, untouched (in the compact form, the frame's
	// body).
	Data []byte
	// ReceivedAt is when the helper received the dispatch.
	ReceivedAt time.Time
	// HeaderErrors describes malformed headers, nil when all parsed.
	HeaderErrors []error

	w     *Worker
	resp  *Response // nil: the producer asked for no response
	state reqState  // guarded by w.mu
	// ctx and cancel are made by the first Context call; cause is why the
	// helper ended the request on its own; all guarded by w.mu.
	ctx    context.Context
	cancel context.CancelCauseFunc
	cause  error
	// period is the keep-alive period (a third of the ack wait) and next the
	// time of the next +WPI, both set at acceptance; guarded by w.mu.
	period time.Duration
	next   time.Time
	// joined are the further dispatches of the request accepted while it
	// ran (dedupe.go); recorded and recordStatus say that a completion
	// record was published, and its status; guarded by w.mu.
	joined       []joinedDispatch
	recorded     bool
	recordStatus string
}

type reqState uint8

const (
	stateOffered reqState = iota
	stateHeld
	stateFinished
)

func parseRequest(m *nats.Msg, dpStart int, now time.Time) *Request {
	r := &Request{
		RequestID:   HeaderValue(m.Header, wire.HeaderRequestID),
		Class:       HeaderValue(m.Header, wire.HeaderClass),
		DPRank:      dpStart,
		Ack:         HeaderValue(m.Header, wire.HeaderAck),
		FairnessKey: strings.TrimSpace(HeaderValue(m.Header, wire.HeaderFairnessKey)),
		Header:      m.Header,
		Data:        m.Data,
		ReceivedAt:  now,
	}
	num := func(name string, bits int) uint64 {
		s := HeaderValue(m.Header, name)
		if s == "" {
			return 0
		}
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, bits)
		if err != nil {
			r.HeaderErrors = append(r.HeaderErrors, fmt.Errorf("header %s: %w", name, err))
			return 0
		}
		return v
	}
	r.Seq = num(wire.HeaderSeq, 64)
	r.Cost = num(wire.HeaderCost, 64)
	r.QueuedMs = num(wire.HeaderQueuedMs, 64)
	r.ISL = num(wire.HeaderISLTokens, 64)
	if HeaderValue(m.Header, wire.HeaderDPRank) != "" {
		r.DPRank = int(num(wire.HeaderDPRank, 16))
	}
	r.setAckWait(num(wire.HeaderAckWaitMs, 64))
	return r
}

// parseCompact parses a dispatch in the compact form (docs/protocol.md,
// Compact dispatch form). It fails only on a frame that does not decode:
// the request cannot be told apart from its body then.
func parseCompact(m *nats.Msg, now time.Time) (*Request, error) {
	var d wire.Dispatch
	h, body, err := wire.DecodeDispatch(m.Data, &d)
	if err != nil {
		return nil, err
	}
	r := &Request{
		RequestID: d.RequestID, Class: d.Class, DPRank: int(d.DPRank), Seq: d.Seq, Cost: d.Cost,
		QueuedMs: d.QueuedMs, Ack: d.Ack, Header: nats.Header(h), Compact: true, Data: body, ReceivedAt: now,
		FairnessKey: strings.TrimSpace(HeaderValue(h, wire.HeaderFairnessKey)),
	}
	if s := HeaderValue(h, wire.HeaderISLTokens); s != "" {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			r.HeaderErrors = append(r.HeaderErrors, fmt.Errorf("header %s: %w", wire.HeaderISLTokens, err))
		} else {
			r.ISL = v
		}
	}
	r.setAckWait(d.AckWaitMs)
	return r, nil
}

// setAckWait sets AckWait from Dispatch-Ack-Wait-Ms, 0 when absent or above
// maxAckWaitMs (an error then).
func (r *Request) setAckWait(ms uint64) {
	switch {
	case ms > maxAckWaitMs:
		r.HeaderErrors = append(r.HeaderErrors, fmt.Errorf("header %s: %d ms is above %d", wire.HeaderAckWaitMs, ms, maxAckWaitMs))
	case ms > 0:
		r.AckWait = time.Duration(ms) * time.Millisecond
	}
}

// maxAckWaitMs bounds Dispatch-Ack-Wait-Ms, so that it converts to a Duration: 30 days.
const maxAckWaitMs = 30 * 24 * 3600 * 1000

// Response returns the response the producer asked for (Dispatch-Response-To),
// nil when it asked for none (docs/protocol.md, Responses).
func (r *Request) Response() *Response { return r.resp }

// Context returns a context that is done once the helper has ended the
// request on its own: the producer or the dispatcher cancelled it, nobody
// listens to its response, another execution took its response over, or
// Stop's grace ran out. context.Cause says which (ErrCancelled,
// ErrNoListener, ErrTaken, ErrStopped, ErrBadResponseSubject). The helper has
// then already done what the protocol asks (end marker, +TERM or -NAK, or
// nothing for ErrTaken): the application only stops working, and finishing
// calls return ErrFinished. The context is made on the first call.
func (r *Request) Context() context.Context {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancelCause(context.Background())
		if r.cause != nil {
			r.cancel(r.cause)
		}
	}
	return r.ctx
}

// Cause returns why the helper ended the request on its own, nil while it
// has not.
func (r *Request) Cause() error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.cause
}

// endTimeout bounds the wait for the claim and the end marker that Done and
// Term send on their own for a request with a response; the
// acknowledgement after it is the acker's, as without a response.
const endTimeout = 30 * time.Second

// Done sends +ACK: the request is finished and its JetStream message removed.
// It returns ErrFinished when the request was already finished.
//
// The acknowledgement is confirmed (docs/protocol.md, After accepting): Done
// publishes +ACK as a NATS request and returns; the helper sends it again
// until JetStream answers (acker.go), so that an acknowledgement lost around
// a NATS server restart or a reconnection does not leave the finished
// request to be dispatched again after its ack wait. Done costs the caller
// one publish, as a plain acknowledgement does. The helper gives up once the
// request's ack wait has passed with an attempt made while connected still
// unanswered, when the connection closes, or when Stop's grace runs out
// ([Stats].AcksUnconfirmed counts those): JetStream then redelivers the
// request unless an attempt took effect after all, and a redelivery to this
// worker within FinishedWindow is acknowledged again without running
// (docs/protocol.md, A dispatch of a request already finished). With
// Config.PlainAcks it publishes a plain +ACK instead.
//
// The request is remembered as finished (for FinishedWindow). For a
// request with a response it ends the response with status ok (in the
// background: the end marker, then a confirmed +ACK), as [Response.End] does.
func (r *Request) Done() error { return r.DoneAfter(nil) }

// DoneAfter is [Request.Done] calling before(attempt), when not nil, ahead of
// every attempt of the acknowledgement (attempt counts from 1): the first on
// the caller's goroutine before DoneAfter returns, the others on the
// helper's; it must not block. It is not called when DoneAfter returns
// ErrFinished. It is for a worker that publishes its completion record before
// acknowledging (at least once: a worker that dies in between causes a
// redelivery, not a lost record): publishing it again ahead of each attempt
// puts a copy before the acknowledgement JetStream confirms, in the same
// connection, even when an earlier copy went down with a server. With a
// response, before runs ahead of the attempts of the +ACK that follows the
// end marker.
func (r *Request) DoneAfter(before func(attempt int)) error {
	if r.resp != nil {
		return r.endInBackground(wire.ResponseEnd{Status: wire.EndOK}, ackAck, before)
	}
	return r.finish(ackAck, "ack", before)
}

// endInBackground ends r's response with e and acknowledges with ack, off
// the caller's goroutine.
func (r *Request) endInBackground(e wire.ResponseEnd, ack []byte, before func(int)) error {
	if !r.w.isHeld(r) {
		return ErrFinished
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		defer cancel()
		err := r.resp.end(ctx, e)
		if err == nil {
			// Through the acker: retried while connected until the ack
			// wait, and waited for by Stop.
			err = r.finish(ack, string(ack), before)
		}
		if err != nil && !errors.Is(err, ErrFinished) {
			about(r.w.log.Warn(), r).Err(err).Msg("end of response")
		}
	}()
	return nil
}

// Completion returns the request's completion record (docs/protocol.md,
// Completion records) for what it really cost: the uncached input tokens the
// engine computed, the output tokens it generated, and whether it failed. The
// times are the helper's: received and started at ReceivedAt, finished now;
// set StartedAt and FinishedAt if the engine knows better.
func (r *Request) Completion(prefillTokens, outputTokens uint64, failed bool) wire.Completion {
	st := wire.StatusOK
	if failed {
		st = wire.StatusFailed
	}
	return wire.Completion{
		RequestID: r.RequestID, Class: r.Class, WorkerID: r.w.cfg.ID, DPRank: r.DPRank, Seq: r.Seq,
		QueuedMs: r.QueuedMs, ReceivedAt: r.ReceivedAt, StartedAt: r.ReceivedAt, FinishedAt: time.Now(),
		FairnessKey: r.FairnessKey, PrefillTokens: prefillTokens, OutputTokens: outputTokens, Status: st,
	}
}

// Complete publishes the request's completion record on
// <prefix>.done.<worker_id> (core NATS), so that the dispatcher settles its cost
// against the estimate it charged (docs/design.md, Cost settlement). Call it
// after Done (or DoneConfirmed). It is optional: without it the estimate
// stands. It is [Request.PublishCompletion] of [Request.Completion].
func (r *Request) Complete(prefillTokens, outputTokens uint64, failed bool) error {
	return r.PublishCompletion(r.Completion(prefillTokens, outputTokens, failed))
}

// PublishCompletion publishes c as the request's completion record, and a
// record with 0 tokens (c's status) for each further dispatch of the
// request that joined its execution: one record per dispatch accepted
// (docs/protocol.md, A second dispatch of a request already running). The
// helper then remembers that the request has records: a later dispatch of
// it answered from the finished-request memory gets a record with 0 tokens
// too. It may be called more than once (before each acknowledgement attempt,
// [Request.DoneAfter]): the dispatcher settles a dispatch once.
func (r *Request) PublishCompletion(c wire.Completion) error {
	w := r.w
	w.mu.Lock()
	r.recorded, r.recordStatus = true, c.Status
	if r.state == stateFinished && r.RequestID != "" {
		w.finished.recorded(r.RequestID, c.Status)
	}
	joined := append([]joinedDispatch(nil), r.joined...)
	w.mu.Unlock()
	if err := w.publishCompletion(c); err != nil {
		return err
	}
	for _, j := range joined {
		z := c
		z.Seq, z.Class, z.FairnessKey, z.DPRank, z.QueuedMs = j.seq, j.class, j.key, j.rank, j.queuedMs
		z.PrefillTokens, z.OutputTokens, z.CachedTokens = 0, 0, 0
		if err := w.publishCompletion(z); err != nil {
			return err
		}
	}
	return nil
}

// publishCompletion publishes one completion record.
func (w *Worker) publishCompletion(c wire.Completion) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("worker: encode completion: %w", err)
	}
	if err := w.nc.Publish(w.doneSubj, b); err != nil {
		return fmt.Errorf("worker: publish completion: %w", err)
	}
	return nil
}

// Nak sends -NAK: the request goes back to the dispatcher for redelivery at once.
// A request whose response has a chunk written cannot go back (it must not
// run again): Nak returns ErrResponseStarted and sends nothing; end the
// response instead. Before the first chunk the response closes silently:
// the next execution claims it afresh.
//
// The -NAK is sent as a NATS request too, and sent again only when the
// answer proves it was not taken ("no responders"): after an unanswered
// attempt it may have taken effect, and another -NAK would hand back the
// redelivery, which another worker may run by then. A -NAK lost costs the
// request one ack wait of delay, never a second run. A request handed back
// is not remembered as finished.
func (r *Request) Nak() error {
	if p := r.resp; p != nil {
		if p.Chunks() > 0 {
			return ErrResponseStarted
		}
		if r.w.isHeld(r) {
			p.close(errHandedBack, "", false)
		}
	}
	return r.finish(ackNak, "nak", nil)
}

// errHandedBack is the cause of a response closed by Nak.
var errHandedBack = errors.New("worker: request handed back")

// Term sends +TERM: the request is dropped. For a request with a response
// it first ends the response with status failed (in the background). The
// +TERM is confirmed as Done's +ACK is, and the request remembered as
// finished: a redelivery of it within FinishedWindow is dropped again
// without running.
func (r *Request) Term() error {
	if r.resp != nil {
		return r.endInBackground(wire.ResponseEnd{Status: wire.EndFailed, Error: "dropped by the worker"}, ackTerm, nil)
	}
	return r.finish(ackTerm, "term", nil)
}

// DoneSync is Done making one attempt and waiting until JetStream answers it
// or ctx ends. The request counts as finished even when the confirmation
// fails; the error then says the acknowledgement may be lost. Prefer Done,
// which retries, or DoneConfirmed, which retries and waits.
// For a request with a response it is [Response.End] with status ok.
func (r *Request) DoneSync(ctx context.Context) error {
	if r.resp != nil {
		return r.resp.finish(ctx, wire.ResponseEnd{Status: wire.EndOK}, ackAck, nil)
	}
	ack, ok := r.w.release(r, ackAck)
	if !ok {
		return ErrFinished
	}
	if ack == "" {
		return nil
	}
	if _, err := r.w.nc.RequestWithContext(ctx, ack, ackAck); err != nil {
		return fmt.Errorf("worker: ack request %s: %w", r.RequestID, err)
	}
	return nil
}

// Backoff between attempts of [Request.DoneConfirmed] and the time one attempt
// waits for JetStream's answer.
const (
	confirmBackoffMin = 20 * time.Millisecond
	confirmBackoffMax = 500 * time.Millisecond
	confirmAttempt    = time.Second
)

// DoneConfirmed is the synchronous form of Done: it marks the request
// finished, sends +ACK as a NATS request and, until JetStream answers or ctx
// ends, sends it again after a short backoff (20 ms doubling to 500 ms)
// whenever an attempt times out (1 s), finds no responders (JetStream still
// recovering its consumers after a server restart or a leader change) or
// meets a broken connection, and returns the outcome. It blocks the caller
// for at least one round trip to JetStream; Done does not. A plain +ACK published during a server restart can be lost: it
// is buffered by nats.go and flushed on reconnect, possibly before the
// consumer is back, and JetStream then redelivers the message after its ack
// wait although the work was done.
//
// Retrying is safe: JetStream answers an ack of a message it no longer holds
// (already acknowledged, removed from a work-queue stream) like any other, so
// an attempt whose answer was lost is confirmed by the next. It may not
// answer at all in rare cases (a consumer leader not yet caught up with the
// stream ignores the ack), so bound ctx: past the request's ack wait the
// message may have been redelivered anyway.
//
// It returns nil once JetStream confirmed, ErrFinished when the request was
// already finished, and otherwise an error wrapping ctx's error or
// nats.ErrConnectionClosed (or nats.ErrConnectionDraining): the acknowledgement
// may then be lost. The request counts as finished from the call on, as with
// Done: [Worker.Stop] does not wait for the confirmation.
func (r *Request) DoneConfirmed(ctx context.Context) error { return r.DoneConfirmedAfter(ctx, nil) }

// DoneConfirmedAfter is [Request.DoneConfirmed] calling before(attempt), when
// not nil, ahead of every attempt (attempt counts from 1), once the request
// is marked finished; it is not called when DoneConfirmedAfter returns
// ErrFinished. For a request with a response it is [Response.EndAfter] with
// status ok. It is for a worker that publishes its result on the worker's
// connection before acknowledging (at least once: a worker that dies in
// between causes a redelivery, not a lost result): publishing it again ahead
// of each attempt puts a copy of the result before the acknowledgement that
// JetStream confirms, in the same connection, even when an earlier copy went
// down with a server. Subscribers may thus get identical copies of a result.
func (r *Request) DoneConfirmedAfter(ctx context.Context, before func(attempt int)) error {
	if r.resp != nil {
		return r.resp.finish(ctx, wire.ResponseEnd{Status: wire.EndOK}, ackAck, before)
	}
	return r.finishConfirmed(ctx, ackAck, false, before)
}

// finishConfirmed releases r and acknowledges it with body, waiting for
// JetStream's answer (confirmAck), or with one plain publish when plain.
func (r *Request) finishConfirmed(ctx context.Context, body []byte, plain bool, before func(int)) error {
	subj, ok := r.w.release(r, body)
	if !ok {
		return ErrFinished
	}
	if done, err := r.w.ackUnconfirmed(r, subj, body, plain, before); done {
		return err
	}
	return confirmAck(ctx, r.w.nc, subj, r.RequestID, body, before)
}

// confirmAck sends body (+ACK, +TERM) to subj as a request until it is
// answered; see [Request.DoneConfirmedAfter].
func confirmAck(ctx context.Context, nc *nats.Conn, subj, id string, body []byte, before func(int)) error {
	backoff := confirmBackoffMin
	var last error
	for attempt := 1; ; attempt++ {
		if before != nil {
			before(attempt)
		}
		actx, cancel := context.WithTimeout(ctx, confirmAttempt)
		_, err := nc.RequestWithContext(actx, subj, body)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
			errors.Is(err, nats.ErrBadSubject) {
			return fmt.Errorf("worker: ack request %s (attempt %d): %w", id, attempt, err)
		}
		if ctx.Err() != nil {
			break
		}
		// Timeout, no responders, disconnected, reconnect buffer full: again.
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(2*backoff, confirmBackoffMax)
	}
	return fmt.Errorf("worker: ack request %s unconfirmed (last attempt: %v): %w", id, last, ctx.Err())
}

// finish releases r and acknowledges it with body.
func (r *Request) finish(body []byte, what string, before func(int)) error {
	ack, ok := r.w.release(r, body)
	if !ok {
		return ErrFinished
	}
	if err := r.w.acknowledge(r, ack, body, before); err != nil {
		return fmt.Errorf("worker: %s request %s: %w", what, r.RequestID, err)
	}
	return nil
}

// ackSubjectLocked returns the acknowledgement subject of r's latest
// delivery: the last joined dispatch's, else Ack. Any delivery's subject
// acknowledges the message (JetStream matches by stream sequence), and the
// latest is the one a -NAK may name without touching a delivery it does not
// know. w.mu is held.
func (r *Request) ackSubjectLocked() string {
	for i := len(r.joined) - 1; i >= 0; i-- {
		if r.joined[i].ack != "" {
			return r.joined[i].ack
		}
	}
	return r.Ack
}

// How a request ended, for the finished-request memory.
type finishKind uint8

const (
	finishedHandedBack finishKind = iota // -NAK, or left to another execution: not remembered
	finishedDone                         // +ACK
	finishedDropped                      // +TERM
)

func finishKindOf(body []byte) finishKind {
	switch {
	case bytes.HasPrefix(body, ackAck):
		return finishedDone
	case bytes.HasPrefix(body, ackTerm):
		return finishedDropped
	}
	return finishedHandedBack
}

// acknowledge sends body (+ACK, +TERM, -NAK) for r to subj: confirmed by
// the acker, or plain with Config.PlainAcks; before, when not nil, runs
// ahead of every attempt. Nothing is sent when subj is empty.
func (w *Worker) acknowledge(r *Request, subj string, body []byte, before func(int)) error {
	if done, err := w.ackUnconfirmed(r, subj, body, w.ack == nil, before); done {
		return err
	}
	aw := r.AckWait
	if aw <= 0 {
		aw = w.cfg.AckWait
	}
	return w.ack.send(subj, r.RequestID, body, aw, before)
}

// ackUnconfirmed does what an acknowledgement body to subj, r's latest
// delivery's, needs when it is not to be confirmed: nothing when subj is
// empty (nothing to acknowledge), else plain publishes: a -NAK to subj, a
// +ACK or +TERM to the subject of each of r's deliveries, so that one lost
// does not leave the message (docs/protocol.md, A second dispatch of a
// request already running); before(1), when not nil, runs first. It reports
// false, doing nothing, when the acknowledgement is to be confirmed. r is
// released: its deliveries no longer change.
func (w *Worker) ackUnconfirmed(r *Request, subj string, body []byte, plain bool, before func(int)) (done bool, err error) {
	if subj != "" && !plain {
		return false, nil
	}
	if before != nil {
		before(1)
	}
	if subj == "" {
		return true, nil
	}
	send := func(to string) {
		w.plainAcks.Add(1)
		err = errors.Join(err, w.nc.Publish(to, body))
	}
	if finishKindOf(body) != finishedHandedBack {
		for _, j := range r.joined {
			if j.ack != "" && j.ack != subj {
				send(j.ack)
			}
		}
		if r.Ack != "" && r.Ack != subj {
			send(r.Ack)
		}
	}
	send(subj)
	return true, err
}
