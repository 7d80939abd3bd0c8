package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fairdispatch/internal/jsstorage"
	"fairdispatch/wire"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Tuning of DeadLetterer.
const (
	// DLQWindow is the most dead letters published and not yet acknowledged
	// by JetStream at once.
	DLQWindow = 256
	// DLQAckTimeout is how long one publish waits for JetStream's
	// acknowledgement before it is retried.
	DLQAckTimeout = 5 * time.Second
	// dlqRetryMin and dlqRetryMax bound the backoff between failed attempts
	// of one dead letter (a disconnect is retried as soon as the connection is
	// back, without backoff).
	dlqRetryMin = 100 * time.Millisecond
	dlqRetryMax = 5 * time.Second
)

// DeadLetter is one request to move to DLQStream (docs/protocol.md, Outcomes).
type DeadLetter struct {
	// Class is the physical class, or the request's subject token when no
	// class could be resolved. It is the last token of the DLQ subject
	// "<prefix>.dlq.<class>" and becomes Dispatch-Class.
	Class string
	// RequestID is the request id; it becomes Dispatch-Request-Id and
	// Nats-Msg-Id, so that a retried dead-lettering is stored once. Required.
	RequestID string
	// Code is the error code (docs/protocol.md, Outcomes, e.g. "queue_full"); it becomes Dispatch-Error.
	Code string
	// Message is the human-readable error; it becomes Dispatch-Error-Message.
	Message string
	// Subject is the subject the request was published to; it becomes
	// Dispatch-Subject when not empty.
	Subject string
	// Header is the request's original headers. They are copied, not kept,
	// except those whose names start with "Nats-": they belong to NATS and
	// would steer the DLQ publish (Nats-Expected-Stream, Nats-TTL...).
	Header nats.Header
	// Body is the request's body, stored untouched. It is not copied: do not
	// modify it until done is called.
	Body []byte
	// DropBody stores the letter without Body, with Dispatch-Body-Dropped set
	// to its size: for a request whose body is too large to forward or store.
	DropBody bool
	// Bare leaves out the body and every original header (the letter carries
	// only ours and Dispatch-Headers-Dropped: all): the last resort for a
	// request whose headers alone cannot be stored.
	Bare bool
}

// ErrStoreFull is wrapped (with ErrConnectionFault) by the error of a dead
// letter JetStream refused for want of room: the DLQ at its own limit, or the
// JetStream store or account full. A later attempt can succeed.
var ErrStoreFull = errors.New("no room to store it")

// DeadLetterer publishes dead letters to DLQStream with JetStream
// acknowledgement. At most DLQWindow publishes are unacknowledged at once;
// the rest wait in FIFO order. A failed publish is retried: at once when the
// connection comes back after a disconnect (every pending asynchronous publish
// fails with nats.ErrDisconnected then), with exponential backoff (100 ms to
// 5 s) otherwise, except a refusal for want of room, which ends the letter at
// once with ErrStoreFull. Each retry carries the same Nats-Msg-Id, so JetStream stores
// the letter once as long as it is stored within the stream's duplicate window.
//
// One goroutine owns all state and calls every done function; done must not
// block. Publish, Pending and Close are safe for concurrent use.
type DeadLetterer struct {
	nc   *nats.Conn
	js   jetstream.JetStream // our own context: its async handlers are ours
	subj Subjects
	log  zerolog.Logger

	mu       sync.Mutex
	incoming []*letter
	events   []pubEvent
	closed   bool
	ctxDone  <-chan struct{} // set by Close
	closeCtx context.Context

	pending atomic.Int64
	retries atomic.Uint64
	wake    chan struct{} // cap 1
	closing chan struct{}
	exited  chan struct{}
	result  error // set by the goroutine before exited is closed
}

// letter is one dead letter on its way.
type letter struct {
	subject   string
	header    nats.Header
	body      []byte
	requestID string
	class     string
	done      func(error)
	attempts  int
	bo        *backoff.ExponentialBackOff // on the first non-disconnect failure
	retryAt   time.Time
}

// pubEvent is an asynchronous publish result, handed from NATS's goroutines
// to ours.
type pubEvent struct {
	msg *nats.Msg
	ack *jetstream.PubAck
	err error
}

// NewDeadLetterer starts a DeadLetterer on js's connection. It makes its own
// JetStream context there (the asynchronous acknowledgement handlers and the
// window are per context); publishing needs nothing else of js. prefix is the
// subject prefix ("" means DefaultPrefix).
func NewDeadLetterer(js jetstream.JetStream, prefix string, log zerolog.Logger) (*DeadLetterer, error) {
	subj, err := NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: dead letterer: %w", err)
	}
	if js == nil || js.Conn() == nil {
		return nil, errors.New("bus: dead letterer: nil JetStream")
	}
	d := &DeadLetterer{
		nc:      js.Conn(),
		subj:    subj,
		log:     log.With().Str("component", "bus").Logger(),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		exited:  make(chan struct{}),
	}
	d.js, err = jetstream.New(d.nc,
		jetstream.WithPublishAsyncMaxPending(DLQWindow),
		jetstream.WithPublishAsyncTimeout(DLQAckTimeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			d.event(pubEvent{msg: m, ack: ack})
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			d.event(pubEvent{msg: m, err: err})
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("bus: dead letterer: %w", err)
	}
	go d.run()
	return d, nil
}

// Publish queues dl for the DLQ and returns at once. done is called exactly
// once, from the DeadLetterer's goroutine, when Publish returned nil: with nil
// once JetStream has stored the letter (or reports it a duplicate of a stored
// one), with an error wrapping ErrRequestFault when this letter can never be
// stored (too large for the stream or the connection: the caller may try a
// smaller one), or an error wrapping ErrConnectionFault when the server cannot
// store dead letters at all or Close gives up on it; also wrapping
// ErrStoreFull at JetStream's first refusal for want of room (the DLQ at its
// limit, the store full: docs/protocol.md, When a stream or the store is
// full), which is not retried here. Publish fails without
// calling done for an invalid letter (no RequestID, nil done; a class that is
// not a subject token wraps ErrRequestFault) or after Close (ErrClosed).
func (d *DeadLetterer) Publish(dl DeadLetter, done func(error)) error {
	if done == nil {
		return errors.New("bus: dead letter: nil done function")
	}
	if dl.RequestID == "" {
		return errors.New("bus: dead letter: empty request id")
	}
	if !validToken(dl.Class) {
		return fmt.Errorf("%w: %w: dead letter %s: class %q", ErrRequestFault, ErrInvalidSubject, dl.RequestID, dl.Class)
	}
	l := &letter{
		subject:   d.subj.DLQ(dl.Class),
		header:    dlqHeader(dl),
		body:      letterBody(dl),
		requestID: dl.RequestID,
		class:     dl.Class,
		done:      done,
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.incoming = append(d.incoming, l)
	d.pending.Add(1)
	d.mu.Unlock()
	d.signal()
	return nil
}

// Pending returns the number of dead letters accepted by Publish whose done
// has not been called yet.
func (d *DeadLetterer) Pending() int { return int(d.pending.Load()) }

// Retries returns how many publishes failed and were scheduled again with
// backoff (a disconnect, republished at once on reconnection, is not counted).
// A dead letter the DLQ keeps refusing is retried at most every 5 s.
func (d *DeadLetterer) Retries() uint64 { return d.retries.Load() }

// Close stops accepting letters and waits until every pending one is stored,
// or ctx ends: then the remaining ones get done(err) with an error wrapping
// ctx.Err(), and Close returns such an error too. Close waits for the
// goroutine to exit; later calls return the first call's result.
func (d *DeadLetterer) Close(ctx context.Context) error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		d.closeCtx = ctx
		d.ctxDone = ctx.Done()
		close(d.closing)
	}
	d.mu.Unlock()
	<-d.exited
	return d.result
}

// letterBody is what a letter stores as its body.
func letterBody(dl DeadLetter) []byte {
	if dl.DropBody || dl.Bare {
		return nil
	}
	return dl.Body
}

// dlqHeader builds the DLQ copy's headers (docs/protocol.md, Dead letters).
// Headers whose names NATS cannot send are left out and listed in
// Dispatch-Headers-Dropped, so that a request is never refused by the DLQ for
// a header its producer got past the server.
func dlqHeader(dl DeadLetter) nats.Header {
	h := make(nats.Header, len(dl.Header)+len(letterHeaders)+1)
	var dropped []string
	for k, v := range dl.Header {
		if dl.Bare {
			break
		}
		if isNatsHeader(k) || slices.ContainsFunc(letterHeaders, func(o string) bool { return strings.EqualFold(o, k) }) {
			continue // ours replace theirs, whatever the spelling
		}
		if !HeaderNameOK(k) {
			dropped = append(dropped, k)
			continue
		}
		h[k] = slices.Clone(v)
	}
	switch {
	case dl.Bare && len(dl.Header) > 0:
		h.Set(wire.HeaderHeadersDropped, "all")
	case len(dropped) > 0:
		slices.Sort(dropped)
		h.Set(wire.HeaderHeadersDropped, quoteNames(dropped))
	}
	if dl.DropBody || dl.Bare {
		h.Set(wire.HeaderBodyDropped, strconv.Itoa(len(dl.Body)))
	}
	h.Set(wire.HeaderError, headerValue(dl.Code))
	h.Set(wire.HeaderErrorMessage, headerValue(dl.Message))
	h.Set(wire.HeaderRequestID, headerValue(dl.RequestID))
	h.Set(wire.HeaderClass, dl.Class)
	if dl.Subject != "" {
		h.Set(wire.HeaderSubject, headerValue(dl.Subject))
	}
	h.Set(wire.HeaderMsgID, headerValue(dl.RequestID))
	return h
}

// headerValue makes s safe as a NATS header value: no line breaks.
func headerValue(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(s)
}

func (d *DeadLetterer) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// event records an asynchronous publish result. It runs on NATS's goroutines
// (sometimes with the JetStream context's lock held), so it only appends.
func (d *DeadLetterer) event(e pubEvent) {
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
	d.signal()
}

// run owns the letters: it publishes, matches results, retries and calls done.
func (d *DeadLetterer) run() {
	defer close(d.exited)
	connected := d.nc.StatusChanged(nats.CONNECTED)
	defer d.nc.RemoveStatusListener(connected)
	defer d.js.CleanupPublisher()

	var (
		ready    []*letter                 // to publish, FIFO
		waiting  []*letter                 // to publish at retryAt
		inflight = map[*nats.Msg]*letter{} // published, result pending
		timer    = time.NewTimer(time.Hour)
		closingC = d.closing // nil once seen closed
	)
	timer.Stop()
	defer timer.Stop()

	finish := func(l *letter, err error) {
		d.pending.Add(-1)
		l.done(err)
	}
	retry := func(l *letter, err error, now time.Time) {
		ev := d.log.Warn().Err(err).Str("request_id", l.requestID).Str("class", l.class).
			Str("subject", l.subject).Int("attempt", l.attempts)
		if errors.Is(err, nats.ErrDisconnected) {
			ev.Msg("dead letter publish interrupted by disconnect, republishing")
			ready = append(ready, l)
			return
		}
		if fault := permanentPublishError(err); fault != nil {
			ev.Msg("dead letter cannot be stored")
			finish(l, fmt.Errorf("bus: dead letter %s to %s: %w: %w", l.requestID, l.subject, fault, err))
			return
		}
		if reason, full := jsstorage.Refused(err); full {
			// No room: retrying here would keep the request held (and its
			// held slot taken) for as long as the DLQ is full. The caller
			// hands it back to the request stream instead, and logs it
			// (rate-limited: a full DLQ refuses every letter).
			d.log.Debug().Err(err).Str("request_id", l.requestID).Str("class", l.class).Str("subject", l.subject).
				Str("reason", reason).Msg("dead letter refused: no room in the DLQ or the JetStream store")
			finish(l, fmt.Errorf("bus: dead letter %s to %s: %w: %w: %w", l.requestID, l.subject, ErrConnectionFault, ErrStoreFull, err))
			return
		}
		if l.bo == nil {
			l.bo = backoff.NewExponentialBackOff()
			l.bo.InitialInterval = dlqRetryMin
			l.bo.MaxInterval = dlqRetryMax
			l.bo.MaxElapsedTime = 0
			l.bo.Reset()
		}
		wait := l.bo.NextBackOff()
		l.retryAt = now.Add(wait)
		d.retries.Add(1)
		ev.Dur("retry_in", wait).Msg("dead letter publish failed, retrying")
		waiting = append(waiting, l)
	}

	for {
		d.mu.Lock()
		in, evs := d.incoming, d.events
		d.incoming, d.events = nil, nil
		closing, ctxDone := d.closed, d.ctxDone
		d.mu.Unlock()
		ready = append(ready, in...)
		now := time.Now()

		for _, e := range evs {
			l, ok := inflight[e.msg]
			if !ok {
				continue // a result for an attempt we already gave up on
			}
			delete(inflight, e.msg)
			if e.err != nil {
				retry(l, e.err, now)
				continue
			}
			d.log.Debug().Str("request_id", l.requestID).Str("class", l.class).Str("subject", l.subject).
				Uint64("stream_seq", e.ack.Sequence).Bool("duplicate", e.ack.Duplicate).Msg("dead letter stored")
			finish(l, nil)
		}

		// Due retries go to the back of the ready queue.
		var next time.Time
		kept := waiting[:0]
		for _, l := range waiting {
			if !l.retryAt.After(now) {
				ready = append(ready, l)
				continue
			}
			if next.IsZero() || l.retryAt.Before(next) {
				next = l.retryAt
			}
			kept = append(kept, l)
		}
		clear(waiting[len(kept):])
		waiting = kept

		// Publish while connected and the window allows.
		for len(ready) > 0 && len(inflight) < DLQWindow && d.nc.Status() == nats.CONNECTED {
			l := ready[0]
			ready[0] = nil
			ready = ready[1:]
			l.attempts++
			m := &nats.Msg{Subject: l.subject, Header: l.header, Data: l.body}
			inflight[m] = l
			if _, err := d.js.PublishMsgAsync(m); err != nil {
				delete(inflight, m)
				retry(l, err, now)
				if !l.retryAt.IsZero() && (next.IsZero() || l.retryAt.Before(next)) {
					next = l.retryAt
				}
			}
		}
		if len(ready) == 0 {
			ready = nil // let the backing array go
		}

		if closing && len(ready) == 0 && len(waiting) == 0 && len(inflight) == 0 {
			return
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-d.wake:
		case <-timer.C:
		case <-connected:
		case <-closingC:
			// closed and ctxDone are re-read at the top of the loop.
			closingC = nil
		case <-ctxDone:
			d.mu.Lock()
			err := d.closeCtx.Err()
			d.mu.Unlock()
			n := 0
			abandon := func(l *letter) {
				n++
				d.log.Error().Err(err).Str("request_id", l.requestID).Str("class", l.class).
					Str("subject", l.subject).Int("attempt", l.attempts).Msg("dead letter abandoned at close")
				finish(l, fmt.Errorf("bus: dead letter %s abandoned at close: %w: %w", l.requestID, ErrConnectionFault, err))
			}
			for _, l := range ready {
				abandon(l)
			}
			for _, l := range waiting {
				abandon(l)
			}
			for _, l := range inflight {
				abandon(l)
			}
			d.result = fmt.Errorf("bus: dead letterer closed with %d letters not stored: %w", n, err)
			return
		}
		timer.Stop()
	}
}

// permanentPublishError returns the fault class of an error that retrying the
// same letter cannot fix, or nil for one worth retrying: ErrRequestFault when
// the letter itself is refused (too large, a header NATS cannot send, a bad
// subject), ErrConnectionFault when the server cannot take headers at all.
func permanentPublishError(err error) error {
	switch {
	case requestPublishError(err), errors.Is(err, nats.ErrBadSubject):
		return ErrRequestFault
	case errors.Is(err, nats.ErrHeadersNotSupported):
		return ErrConnectionFault
	}
	return nil
}
