package workerkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// Why the helper ends an accepted request on its own (context.Cause of
// [Request.Context], the cause given to [CancelHandler.Cancelled], and the
// errors of [Response] methods afterwards). Match them with errors.Is.
var (
	// ErrCancelled: the producer answered cancel, or the dispatcher forwarded
	// the producer's cancellation (docs/protocol.md, Cancellation).
	ErrCancelled = errors.New("worker: request cancelled")
	// ErrNoListener: nobody listens to the response (the claim failed, a ping
	// found no responders, or went unanswered too often).
	ErrNoListener = errors.New("worker: nobody listens to the response")
	// ErrTaken: another execution of the request has the response.
	ErrTaken = errors.New("worker: another execution has the response")
	// ErrStopped: the worker stopped (Stop's grace ran out) with the request held.
	ErrStopped = errors.New("worker: worker stopped")
	// ErrPreempted: the dispatcher preempted the request before its first
	// response chunk, and the helper handed it back (docs/protocol.md,
	// Preemption); it runs again later, here or elsewhere.
	ErrPreempted = errors.New("worker: request preempted")
	// ErrBadResponseSubject: Dispatch-Response-To is not a subject a worker
	// may respond to (docs/protocol.md, Asking for a response).
	ErrBadResponseSubject = errors.New("worker: invalid Dispatch-Response-To")
)

// Errors of Response methods.
var (
	// ErrNotClaimed is returned by Write and End before Start succeeded.
	ErrNotClaimed = errors.New("worker: response not claimed")
	// ErrResponseStarted is returned by Request.Nak once a chunk was written:
	// the request must not run again; end the response instead.
	ErrResponseStarted = errors.New("worker: response already started; end it instead of handing it back")
)

// Timing of the response path (docs/protocol.md, Timeouts and bounds).
const (
	answerTimeout = wire.AnswerTimeoutMs * time.Millisecond
	pingInterval  = wire.PingIntervalMs * time.Millisecond
	claimRetry    = wire.ClaimRetryMs * time.Millisecond
)

type respPhase uint8

const (
	phaseClaiming respPhase = iota // the claim is out
	phaseOpen                      // answered go: chunks and pings
	phaseEnding                    // the end marker is out
	phaseClosed                    // ended, or stopped by the helper
)

// Response is the response a producer asked for with Dispatch-Response-To
// (docs/protocol.md, Responses). The helper claims it as soon as the request
// is accepted, pings while it is open, and ends it: [Request.Response]
// returns it. Its methods are safe for concurrent use.
type Response struct {
	r       *Request
	subject string
	exec    string

	claimed chan struct{} // closed once the claim is decided

	mu       sync.Mutex
	phase    respPhase
	err      error // why it closed, or the claim's failure
	chunks   uint64
	attempts int           // claim or end attempts
	ping     *time.Timer   // the next ping, while open
	pingCall uint64        // the outstanding ping's call id, 0 when none
	misses   int           // pings unanswered in a row
	ended    chan struct{} // closed once the end marker is answered or given up
	// finishing is set once the application's end marker is out, and stays:
	// the producer has been told how the request ended, and the request is
	// being acknowledged so (a cancellation or a preemption must not
	// contradict it, before the marker's answer or after).
	finishing bool
}

// Subject returns the response subject (Dispatch-Response-To).
func (p *Response) Subject() string { return p.subject }

// Execution returns this execution's Dispatch-Execution.
func (p *Response) Execution() string { return p.exec }

// Chunks returns the number of chunks written so far.
func (p *Response) Chunks() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.chunks
}

// validResponseSubject reports whether a worker may respond to s: a literal
// subject not starting with "$" or the prefix (docs/protocol.md, Asking for a
// response), of at most wire.MaxSubjectLen bytes (the dispatcher checks it
// too; a longer one would make the server close the worker's connection).
func validResponseSubject(s, prefix string) bool {
	if s == "" || len(s) > wire.MaxSubjectLen || s[0] == '$' || strings.HasPrefix(s, prefix+".") {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if t == "" || t == "*" || t == ">" || strings.ContainsAny(t, " \t\r\n") {
			return false
		}
	}
	return true
}

// newResponse returns r's response, or nil when r asks for none.
func newResponse(r *Request) *Response {
	s := strings.TrimSpace(HeaderValue(r.Header, wire.HeaderResponseTo))
	if s == "" {
		return nil
	}
	return &Response{
		r: r, subject: s,
		exec:    r.w.cfg.ID + "/" + r.w.instance + "/" + strconv.FormatUint(r.Seq, 10),
		claimed: make(chan struct{}),
		ended:   make(chan struct{}),
	}
}

// message returns a response message of kind with seq (0: no seq header).
func (p *Response) message(kind string, seq uint64, hasSeq bool) *nats.Msg {
	h := nats.Header{
		wire.HeaderResponse:  []string{kind},
		wire.HeaderRequestID: []string{p.r.RequestID},
		wire.HeaderExecution: []string{p.exec},
	}
	if hasSeq {
		h[wire.HeaderResponseSeq] = []string{strconv.FormatUint(seq, 10)}
	}
	return &nats.Msg{Subject: p.subject, Header: h}
}

// claim sends one attempt of the claim.
func (p *Response) claim() {
	p.mu.Lock()
	if p.phase != phaseClaiming {
		p.mu.Unlock()
		return
	}
	p.attempts++
	p.mu.Unlock()
	if _, err := p.r.w.ask.ask(p.message(wire.MsgClaim, 0, false), answerTimeout, p.onClaim); err != nil {
		p.onClaim(0, "", errNoAnswer) // a failed publish is retried like a lost one
	}
}

func (p *Response) onClaim(_ uint64, answer string, err error) {
	p.mu.Lock()
	if p.phase != phaseClaiming {
		p.mu.Unlock()
		return
	}
	last := p.attempts >= wire.ClaimAttempts
	var end error
	switch {
	case errors.Is(err, errNoResponders) && !last:
		p.mu.Unlock()
		time.AfterFunc(claimRetry, p.claim)
		return
	case err != nil && !last:
		p.mu.Unlock()
		p.claim()
		return
	case err != nil:
		end = fmt.Errorf("%w: the claim was not answered in %d attempts", ErrNoListener, wire.ClaimAttempts)
	default:
		end = refusal(answer, " (claim)")
	}
	if end != nil {
		p.abortUnlock(end)
		return
	}
	p.phase = phaseOpen
	p.attempts = 0
	p.ping = time.AfterFunc(pingInterval, p.sendPing)
	close(p.claimed)
	p.mu.Unlock()
}

// Start waits until the claim, which the helper sent when the request was
// accepted, is decided, and returns nil when the producer answered go: the
// request may run and chunks be written. Otherwise the helper has already
// ended the request (it must not run): the error wraps ErrCancelled,
// ErrTaken, ErrNoListener or ErrStopped. The claim takes about one round
// trip to the producer, at most about 3 s when it goes unanswered. Start
// returns ctx's error if ctx ends first; the claim goes on.
func (p *Response) Start(ctx context.Context) error {
	select {
	case <-p.claimed:
	case <-ctx.Done():
		select {
		case <-p.claimed: // decided too (the helper closes it before cancelling Request.Context)
		default:
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phase == phaseOpen || p.phase == phaseEnding {
		return nil
	}
	return p.err
}

// Claimed returns a channel closed once the claim is decided, for a caller
// that waits in a select; Start then returns at once.
func (p *Response) Claimed() <-chan struct{} { return p.claimed }

// Write sends one chunk: a plain publish numbered by the helper (1, 2, 3,
// ...). It returns ErrNotClaimed before Start succeeded, and ErrFinished
// once the response has closed, wrapping the helper's cause when the helper
// closed it (ErrCancelled, ErrTaken, ErrNoListener or ErrStopped).
// Concurrent Writes are numbered in the order they take the response's lock.
func (p *Response) Write(chunk []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.phase {
	case phaseClaiming:
		return ErrNotClaimed
	case phaseEnding:
		return ErrFinished
	case phaseClosed:
		return p.closedErr()
	}
	m := p.message(wire.MsgChunk, p.chunks+1, true)
	m.Data = chunk
	if err := p.r.w.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("worker: response chunk %d of %s: %w", p.chunks+1, p.r.RequestID, err)
	}
	p.chunks++
	return nil
}

// WriteWhole sends b, a whole answer (a non-streaming one), as one chunk, or
// as consecutive chunks of at most MaxChunk bytes when it is larger: the
// producer concatenates a response's chunks (docs/protocol.md, OpenAI-shaped
// requests). Each chunk is a Write; an error stops it.
func (p *Response) WriteWhole(b []byte) error {
	n := p.MaxChunk()
	if n <= 0 {
		return fmt.Errorf("worker: response of %s: the server's max_payload leaves no room for a chunk", p.r.RequestID)
	}
	for len(b) > n {
		if err := p.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return p.Write(b)
}

// MaxChunk returns the largest chunk Write can send: the server's
// max_payload less a chunk's headers (docs/protocol.md, Timeouts and bounds).
func (p *Response) MaxChunk() int {
	m := p.message(wire.MsgChunk, math.MaxUint64, true) // the widest sequence number
	return int(p.r.w.nc.MaxPayload()) - headerBytes(m.Header)
}

// headerBytes is the size of h as NATS sends it: "NATS/1.0\r\n", a line a
// value, and an empty line.
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// sendPing sends the next ping: the previous one, if still unanswered, is a
// miss. It runs on its timer's goroutine.
func (p *Response) sendPing() {
	p.mu.Lock()
	if p.phase != phaseOpen {
		p.mu.Unlock()
		return
	}
	if p.pingCall != 0 && p.r.w.ask.forget(p.pingCall) {
		p.misses++
	}
	p.pingCall = 0
	if p.misses >= wire.PingMisses {
		p.abortUnlock(fmt.Errorf("%w: %d pings in a row unanswered", ErrNoListener, wire.PingMisses))
		return
	}
	// Under the lock, so that the ping's count follows every chunk it counts.
	m := p.message(wire.MsgPing, p.chunks, true)
	id, err := p.r.w.ask.ask(m, answerTimeout+pingInterval, p.onPing)
	if err == nil {
		p.pingCall = id
	} else {
		p.misses++
	}
	p.ping.Reset(pingInterval)
	p.mu.Unlock()
}

func (p *Response) onPing(id uint64, answer string, err error) {
	p.mu.Lock()
	if p.phase != phaseOpen || id != p.pingCall {
		p.mu.Unlock()
		return
	}
	p.pingCall = 0
	var end error
	switch {
	case errors.Is(err, errNoResponders):
		end = fmt.Errorf("%w: a ping found no responders", ErrNoListener)
	case err != nil:
		p.misses++
		p.mu.Unlock()
		return
	default:
		end = refusal(answer, "")
	}
	if end != nil {
		p.abortUnlock(end)
		return
	}
	p.misses = 0
	p.mu.Unlock()
}

// abortUnlock releases p.mu, held, and ends the request with cause (the
// helper's end of a request that must not go on: Worker.abort).
func (p *Response) abortUnlock(cause error) {
	p.mu.Unlock()
	p.r.w.abort(p.r, cause)
}

// refusal is the error the producer's answer to a claim or a ping ends the
// request with: ErrCancelled (from where) for cancel, ErrTaken for taken;
// nil for go.
func refusal(answer, where string) error {
	switch answer {
	case wire.AnswerCancel:
		return fmt.Errorf("%w by the producer%s", ErrCancelled, where)
	case wire.AnswerTaken:
		return ErrTaken
	}
	return nil
}

// closedErr is the error of a call on a closed response: ErrFinished, and
// the helper's cause when it closed it; p.mu is held.
func (p *Response) closedErr() error {
	if p.err == nil {
		return ErrFinished
	}
	return fmt.Errorf("%w: %w", ErrFinished, p.err)
}

// stopPings ends the pings; p.mu is held.
func (p *Response) stopPings() {
	if p.ping != nil {
		p.ping.Stop()
	}
	if p.pingCall != 0 {
		p.r.w.ask.forget(p.pingCall)
		p.pingCall = 0
	}
}

// End closes the response with e (its Chunks is set by the helper) and then
// acknowledges the request with a confirmed acknowledgement: +ACK, or +TERM
// for status cancelled (docs/protocol.md, The end marker). It sends the end
// marker as a NATS request, up to 3 attempts of 1 s, and stops trying when
// nobody listens; the acknowledgement is retried as DoneConfirmed does until
// ctx ends. It returns ErrNotClaimed before Start succeeded (after waiting
// for the claim), ErrFinished when the request was finished already
// (wrapping the helper's cause when the helper ended it), or the
// acknowledgement's error.
func (p *Response) End(ctx context.Context, e wire.ResponseEnd) error { return p.EndAfter(ctx, e, nil) }

// EndAfter is End calling before(attempt) ahead of every attempt of the
// acknowledgement, as [Request.DoneConfirmedAfter] does (a completion
// record before each +ACK).
func (p *Response) EndAfter(ctx context.Context, e wire.ResponseEnd, before func(attempt int)) error {
	if e.Status == "" {
		e.Status = wire.EndOK
	}
	ack := ackAck
	if e.Status == wire.EndCancelled {
		ack = ackTermCancelled
	}
	return p.finish(ctx, e, ack, before)
}

// finish waits for the claim, sends the end marker and acknowledges with
// ack, confirmed within ctx.
func (p *Response) finish(ctx context.Context, e wire.ResponseEnd, ack []byte, before func(int)) error {
	if err := p.end(ctx, e); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// The end marker's answer outlasted ctx: the producer has its end,
		// so the message must still be acknowledged, through the acker as
		// Done does, rather than left held.
		if err := p.r.finish(ack, string(ack), before); err != nil {
			return err
		}
		return fmt.Errorf("worker: request %s: end marker sent, acknowledgement not confirmed within ctx: %w", p.r.RequestID, ctx.Err())
	}
	return p.r.finishConfirmed(ctx, ack, p.r.w.cfg.PlainAcks, before)
}

// end waits for the claim (within ctx) and sends the end marker e, the
// request still held: its acknowledgement is the caller's to send. Once the
// marker is on its way, end waits for its answer whatever ctx does (at most
// wire.EndAttempts attempts of the answer timeout): the response is ending
// then, and nothing else would finish the request.
func (p *Response) end(ctx context.Context, e wire.ResponseEnd) error {
	select {
	case <-p.claimed:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	switch p.phase {
	case phaseClaiming:
		p.mu.Unlock()
		return ErrNotClaimed
	case phaseEnding:
		p.mu.Unlock()
		return ErrFinished
	case phaseClosed:
		err := p.closedErr()
		p.mu.Unlock()
		return err
	}
	p.phase, p.finishing = phaseEnding, true
	p.stopPings()
	e.Chunks = p.chunks
	p.mu.Unlock()
	body, err := wire.MarshalResponseEnd(e)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	p.sendEnd(e.Status, body)
	<-p.ended
	p.mu.Lock()
	p.phase = phaseClosed
	p.mu.Unlock()
	return nil
}

// ending reports whether the application's end marker is out (End, or Done
// in the background): the response is finishing with its status, until the
// request is released.
func (p *Response) ending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finishing
}

// sendEnd sends one attempt of the end marker; p.ended is closed once it is
// answered, nobody listens, or the attempts are spent.
func (p *Response) sendEnd(status string, body []byte) {
	p.mu.Lock()
	p.attempts++
	m := p.message(wire.MsgEnd, p.chunks+1, true)
	p.mu.Unlock()
	m.Header[wire.HeaderResponseStatus] = []string{status}
	m.Data = body
	_, err := p.r.w.ask.ask(m, answerTimeout, func(_ uint64, _ string, err error) { p.onEnd(status, body, err) })
	if err != nil {
		p.onEnd(status, body, errNoAnswer)
	}
}

func (p *Response) onEnd(status string, body []byte, err error) {
	p.mu.Lock()
	again := errors.Is(err, errNoAnswer) && p.attempts < wire.EndAttempts
	p.mu.Unlock()
	if again {
		p.sendEnd(status, body)
		return
	}
	close(p.ended)
}

// yieldTo closes the response for a preemption if no chunk was written yet,
// without an end marker (the producer, having seen no chunk, answers the
// next execution's claim go), and reports whether it did. After a chunk it
// changes nothing: tokens the caller saw cannot be taken back.
func (p *Response) yieldTo(cause error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chunks > 0 || p.finishing {
		return false
	}
	p.closeLocked(cause)
	return true
}

// closeLocked closes the response for cause unless it is closed already,
// and returns the phase it was in; p.mu is held. An undecided claim is
// decided then: Start returns cause.
func (p *Response) closeLocked(cause error) (was respPhase) {
	was = p.phase
	if was == phaseClosed {
		return was
	}
	p.phase, p.err = phaseClosed, cause
	p.stopPings()
	if was == phaseClaiming {
		close(p.claimed)
	}
	return was
}

// close closes the response for cause, on the helper's own decision, and
// reports whether chunks had been written. With an end status, an open
// response first gets an end marker (one attempt, not waited for); with
// onlyStarted, only when chunks were written.
func (p *Response) close(cause error, endStatus string, onlyStarted bool) (started bool) {
	p.mu.Lock()
	started = p.chunks > 0
	was := p.closeLocked(cause)
	var m *nats.Msg
	if endStatus != "" && was == phaseOpen && (started || !onlyStarted) {
		m = p.message(wire.MsgEnd, p.chunks+1, true)
		m.Header[wire.HeaderResponseStatus] = []string{endStatus}
		m.Data, _ = wire.MarshalResponseEnd(wire.ResponseEnd{Status: endStatus, Chunks: p.chunks, Error: cause.Error()})
	}
	p.mu.Unlock()
	if m != nil {
		_, _ = p.r.w.ask.ask(m, answerTimeout, func(uint64, string, error) {})
	}
	return started
}
