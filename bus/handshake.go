package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fairdispatch/internal/fifo"
	"fairdispatch/wire"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Header names of the handshake (docs/protocol.md, Dispatch handshake). Readers match Dispatch-* names
// case-insensitively.
const (
	// statusHeader and noResponders are NATS's own status message marking:
	// "Status: 503" with an empty body means nobody listens on the subject.
	statusHeader = "Status"
	noResponders = "503"
)

// Errors of Handshaker.Send.
var (
	// ErrClosed reports use of a closed Handshaker or DeadLetterer. It is a
	// connection fault.
	ErrClosed = fmt.Errorf("bus: closed (%w)", ErrConnectionFault)
	// ErrNotConnected reports a dispatch attempted while the connection is not
	// up (docs/protocol.md, Dispatch handshake: nothing is dispatched while
	// disconnected). It is a connection fault.
	ErrNotConnected = fmt.Errorf("bus: not connected to nats (%w)", ErrConnectionFault)
	// ErrDuplicateToken reports a Send with a token that is still in flight: a
	// bug of the caller, classed as a connection fault so that nobody is blamed.
	ErrDuplicateToken = fmt.Errorf("bus: token already in flight (%w)", ErrConnectionFault)
)

// RequestFault is the error of a request that cannot be sent as it is
// (ErrRequestFault): Reason says why in words fit for a dead letter and an
// outcome (the size against max_payload, or the header names NATS cannot
// send); Err is the publish error.
type RequestFault struct {
	Reason string
	Err    error
}

func (e *RequestFault) Error() string { return "bus: " + e.Reason + ": " + e.Err.Error() }

// Unwrap returns ErrRequestFault and the publish error.
func (e *RequestFault) Unwrap() []error { return []error{ErrRequestFault, e.Err} }

// Outcome is how a worker answered a dispatched request (docs/protocol.md, Dispatch handshake).
type Outcome int

// The outcomes of a dispatch. The zero value is not an outcome.
const (
	// Accepted: the worker replied without Dispatch-Status; it now owns the request.
	Accepted Outcome = iota + 1
	// Refused: the worker replied Dispatch-Status: busy (or another status, or
	// NATS answered with a status other than no-responders).
	Refused
	// NoResponders: nobody subscribes to the worker's subject.
	NoResponders
	// Timeout: no answer within the dispatch timeout (or the Handshaker was
	// closed first). The worker may still have accepted; its answer was lost.
	Timeout
)

// String returns the outcome's lower-case name, suitable for logs and metric labels.
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Refused:
		return "refused"
	case NoResponders:
		return "no_responders"
	case Timeout:
		return "timeout"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is the answer to one Send.
type Result struct {
	// Token is the token given to Send.
	Token uint64
	// Worker is the worker id given to Send.
	Worker string
	// Outcome is how the worker answered.
	Outcome Outcome
}

// Handshaker sends dispatched requests to workers as core NATS requests and
// reports each answer (docs/protocol.md, Dispatch handshake). Any number of requests may be in flight: all
// replies arrive on one wildcard inbox subscription, reply subject
// "<inbox>.<attempt>", and timeouts are run by one goroutine whose timer is set
// to the earliest deadline. As every request has the same timeout, deadlines
// are in send order and live in a FIFO, so Send and each expiry cost O(1)
// amortized.
//
// For every Send that returns nil, deliver is called exactly once with its
// Result: from the subscription's goroutine for an answer, from the timer
// goroutine for a timeout, or from Close for requests still in flight. deliver
// may be called from those goroutines concurrently and must not block. An
// answer that arrives after its timeout is dropped and counted by Late.
//
// A Handshaker is safe for concurrent use.
type Handshaker struct {
	nc      *nats.Conn
	subj    Subjects
	timeout time.Duration
	deliver func(Result)
	log     zerolog.Logger
	inbox   string // "<inbox>." ; replies arrive on inbox + attempt id (base 36)
	sub     *nats.Subscription

	mu      sync.Mutex
	closed  bool
	next    uint64               // last attempt id issued
	pending map[uint64]call      // by attempt id
	tokens  map[uint64]bool      // tokens in flight
	order   fifo.Queue[deadline] // by deadline
	active  sync.WaitGroup       // deliveries of answers in progress

	late atomic.Uint64

	kick chan struct{} // cap 1: the FIFO went from empty to non-empty
	stop chan struct{}
	done chan struct{}
}

type call struct {
	token  uint64
	worker string
}

type deadline struct {
	id uint64
	at time.Time
}

// NewHandshaker subscribes to a fresh inbox on nc and starts the timeout
// goroutine. prefix is the subject prefix ("" means DefaultPrefix); timeout is
// the dispatch timeout (--dispatch-timeout), > 0; deliver receives every Result.
func NewHandshaker(nc *nats.Conn, prefix string, timeout time.Duration, deliver func(Result), log zerolog.Logger) (*Handshaker, error) {
	subj, err := NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: handshaker: %w", err)
	}
	if nc == nil || deliver == nil {
		return nil, errors.New("bus: handshaker: nil connection or deliver function")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("bus: handshaker: dispatch timeout %s must be > 0", timeout)
	}
	h := &Handshaker{
		nc:      nc,
		subj:    subj,
		timeout: timeout,
		deliver: deliver,
		log:     log.With().Str("component", "bus").Logger(),
		inbox:   nc.NewInbox() + ".",
		pending: make(map[uint64]call),
		tokens:  make(map[uint64]bool),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	h.sub, err = nc.Subscribe(h.inbox+"*", h.onReply)
	if err != nil {
		return nil, fmt.Errorf("bus: handshaker: subscribe %s*: %w", h.inbox, err)
	}
	go h.run()
	return h, nil
}

// Send publishes body with hdr to "<prefix>.work.<worker>" as a request whose
// answer will be delivered with token. It does not wait for the answer and
// does not block on the network (NATS buffers the publish). Neither hdr nor
// body is kept after Send returns (NATS copies them into its buffer). hdr is
// nil for the compact dispatch form, whose frame is body (docs/protocol.md,
// Compact dispatch form). Send fails with ErrNotConnected while the connection is
// down, ErrDuplicateToken when token is already in flight, ErrClosed after
// Close, ErrInvalidSubject for a worker id that is not a subject token, or the
// publish error; then deliver is not called for it. Every error wraps its fault
// class (see Fault): a *RequestFault (ErrRequestFault) when the request is over
// max_payload with hdr or has a header NATS cannot send, ErrWorkerFault for an
// invalid worker id, ErrConnectionFault for the rest.
func (h *Handshaker) Send(worker string, hdr nats.Header, body []byte, token uint64) error {
	if !validToken(worker) {
		return fmt.Errorf("%w: %w: worker id %q", ErrWorkerFault, ErrInvalidSubject, worker)
	}
	if h.nc.Status() != nats.CONNECTED {
		return ErrNotConnected
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if h.tokens[token] {
		h.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrDuplicateToken, token)
	}
	h.next++
	id := h.next
	h.pending[id] = call{token: token, worker: worker}
	h.tokens[token] = true
	wasEmpty := h.order.Len() == 0
	// time.Now under the lock keeps the FIFO sorted by deadline.
	h.order.Push(deadline{id: id, at: time.Now().Add(h.timeout)})
	h.mu.Unlock()
	if wasEmpty {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}

	err := h.nc.PublishMsg(&nats.Msg{
		Subject: h.subj.Work(worker),
		Reply:   h.inbox + strconv.FormatUint(id, 36),
		Header:  hdr,
		Data:    body,
	})
	if err != nil {
		h.mu.Lock()
		_, still := h.pending[id]
		if still {
			h.forget(id, token)
		}
		h.mu.Unlock()
		if still {
			if requestPublishError(err) {
				reason := describeRequestFault(h.nc, hdr, body)
				if reason == "" {
					reason = err.Error()
				}
				return &RequestFault{Reason: reason, Err: err}
			}
			return fmt.Errorf("bus: dispatch to %s: %w", worker, publishFault(err))
		}
		// Already resolved (and delivered) meanwhile: the Send stands.
	}
	return nil
}

// InFlight returns the number of requests sent and not yet resolved.
func (h *Handshaker) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

// Late returns how many answers arrived for requests no longer in flight
// (after their timeout, or unknown reply subjects).
func (h *Handshaker) Late() uint64 { return h.late.Load() }

// Close unsubscribes, stops the timer goroutine and delivers Timeout for every
// request still in flight. After Close returns no further deliver call is made.
// Close is idempotent.
func (h *Handshaker) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	left := make([]Result, 0, len(h.pending))
	for id, c := range h.pending {
		left = append(left, Result{Token: c.token, Worker: c.worker, Outcome: Timeout})
		delete(h.pending, id)
	}
	clear(h.tokens)
	h.order = fifo.Queue[deadline]{}
	h.mu.Unlock()

	if err := h.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn().Err(err).Str("subject", h.sub.Subject).Msg("handshake inbox unsubscribe failed")
	}
	close(h.stop)
	<-h.done
	h.active.Wait()
	for _, r := range left {
		h.deliver(r)
	}
}

// forget drops attempt id of token. h.mu must be held.
func (h *Handshaker) forget(id, token uint64) {
	delete(h.pending, id)
	delete(h.tokens, token)
}

// onReply resolves the request an answer is for. It runs on the
// subscription's goroutine.
func (h *Handshaker) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, h.inbox), 36, 64)
	h.mu.Lock()
	c, ok := h.pending[id]
	if err != nil || !ok || h.closed {
		h.mu.Unlock()
		h.late.Add(1)
		h.log.Debug().Str("subject", m.Subject).Msg("late or unknown handshake answer dropped")
		return
	}
	h.forget(id, c.token)
	h.active.Add(1)
	h.mu.Unlock()
	defer h.active.Done()

	out := classify(m)
	if out == Refused {
		if st := wire.HeaderValue(m.Header, wire.HeaderStatus); !strings.EqualFold(strings.TrimSpace(st), "busy") {
			h.log.Warn().Str("worker_id", c.worker).Str("status", st).Str("nats_status", m.Header.Get(statusHeader)).
				Msg("unexpected handshake answer, counted as refused")
		}
	}
	h.deliver(Result{Token: c.token, Worker: c.worker, Outcome: out})
}

// classify maps an answer to its outcome (docs/protocol.md, Dispatch handshake).
func classify(m *nats.Msg) Outcome {
	if st := m.Header.Get(statusHeader); st != "" && len(m.Data) == 0 {
		if st == noResponders {
			return NoResponders
		}
		return Refused // a NATS status message is never an acceptance
	}
	if _, refused := wire.LookupHeader(m.Header, wire.HeaderStatus); refused {
		return Refused // any value, an empty one too (docs/protocol.md, Accepting and refusing)
	}
	return Accepted
}

// run is the timer goroutine: it resolves expired requests as Timeout.
func (h *Handshaker) run() {
	defer close(h.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-h.kick:
		case <-t.C:
		}
		if next, ok := h.expire(time.Now()); ok {
			t.Reset(time.Until(next))
		} else {
			t.Stop()
		}
	}
}

// expire delivers Timeout for every request whose deadline is at or before
// now and returns the next deadline, if any.
func (h *Handshaker) expire(now time.Time) (time.Time, bool) {
	var timedOut []Result
	h.mu.Lock()
	var next time.Time
	ok := false
	for h.order.Len() > 0 {
		d := *h.order.Front()
		c, live := h.pending[d.id]
		if live && d.at.After(now) {
			next, ok = d.at, true
			break
		}
		h.order.Pop()
		if live {
			h.forget(d.id, c.token)
			timedOut = append(timedOut, Result{Token: c.token, Worker: c.worker, Outcome: Timeout})
		}
	}
	if len(timedOut) > 0 {
		h.active.Add(1)
	}
	h.mu.Unlock()
	if len(timedOut) > 0 {
		defer h.active.Done()
	}

	for _, r := range timedOut {
		h.log.Debug().Str("worker_id", r.Worker).Uint64("token", r.Token).Msg("handshake timed out")
		h.deliver(r)
	}
	return next, ok
}
