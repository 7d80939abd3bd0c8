package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names of the wire contract (SPEC 1.1, 1.2). Dispatch-* names match
// case-insensitively; see [HeaderValue].
const (
	HeaderRequestID    = "Dispatch-Request-Id"
	HeaderClass        = "Dispatch-Class"
	HeaderDPRank       = "Dispatch-DP-Rank"
	HeaderSeq          = "Dispatch-Seq"
	HeaderCost         = "Dispatch-Cost"
	HeaderQueuedMs     = "Dispatch-Queued-Ms"
	HeaderAck          = "Dispatch-Ack"
	HeaderISLTokens    = "Dispatch-ISL-Tokens"
	HeaderCachedTokens = "Dispatch-Cached-Tokens"
	HeaderReplyTo      = "Dispatch-Reply-To"
	HeaderStatus       = "Dispatch-Status"
	// StatusBusy is the Dispatch-Status value of a refusal.
	StatusBusy = "busy"
)

// JetStream acknowledgement bodies sent to a request's Dispatch-Ack subject.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// ErrFinished is returned by a second Done, Nak or Term of one request.
var ErrFinished = errors.New("worker: request already finished")

// HeaderValue returns the first value of header name in h, matching the name
// exactly first and then case-insensitively. It returns "" when absent.
// Cost: O(1) for an exact match, else O(len(h)).
func HeaderValue(h nats.Header, name string) string {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}

// Request is one dispatched request, as parsed from the headers of SPEC 1.2.
// Numeric headers that are absent or malformed read as 0 (DPRank as the
// worker's DPStart); HeaderErrors lists the malformed ones.
type Request struct {
	// RequestID is Dispatch-Request-Id.
	RequestID string
	// Class is Dispatch-Class, the physical policy class.
	Class string
	// DPRank is Dispatch-DP-Rank, the rank the dispatcher chose.
	DPRank int
	// Seq is Dispatch-Seq, the worker's dispatch sequence number (SPEC 1.3).
	Seq uint64
	// Cost is Dispatch-Cost, the scheduling cost in uncached tokens.
	Cost uint64
	// QueuedMs is Dispatch-Queued-Ms, the time the request spent queued, in ms.
	QueuedMs uint64
	// ISL is Dispatch-ISL-Tokens, the raw input sequence length in tokens.
	ISL uint64
	// Ack is Dispatch-Ack, the JetStream acknowledgement subject; "" when absent,
	// in which case Done, Nak and Term send nothing.
	Ack string
	// Header is the message's full header, as received. Do not modify it.
	Header nats.Header
	// Data is the request body, untouched.
	Data []byte
	// ReceivedAt is when the helper received the dispatch.
	ReceivedAt time.Time
	// HeaderErrors describes malformed headers, nil when all parsed.
	HeaderErrors []error

	w     *Worker
	state reqState // guarded by w.mu
}

type reqState uint8

const (
	stateOffered reqState = iota
	stateHeld
	stateFinished
)

func parseRequest(m *nats.Msg, dpStart int, now time.Time) *Request {
	r := &Request{
		RequestID:  HeaderValue(m.Header, HeaderRequestID),
		Class:      HeaderValue(m.Header, HeaderClass),
		DPRank:     dpStart,
		Ack:        HeaderValue(m.Header, HeaderAck),
		Header:     m.Header,
		Data:       m.Data,
		ReceivedAt: now,
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
	r.Seq = num(HeaderSeq, 64)
	r.Cost = num(HeaderCost, 64)
	r.QueuedMs = num(HeaderQueuedMs, 64)
	r.ISL = num(HeaderISLTokens, 64)
	if HeaderValue(m.Header, HeaderDPRank) != "" {
		r.DPRank = int(num(HeaderDPRank, 16))
	}
	return r
}

// Done sends +ACK: the request is finished and its JetStream message removed.
// It returns ErrFinished when the request was already finished.
func (r *Request) Done() error { return r.finish(ackAck, "ack") }

// Nak sends -NAK: the request goes back to the dispatcher for redelivery at once.
func (r *Request) Nak() error { return r.finish(ackNak, "nak") }

// Term sends +TERM: the request is dropped.
func (r *Request) Term() error { return r.finish(ackTerm, "term") }

// DoneSync is Done, but sends +ACK as a NATS request and waits until JetStream
// confirms it or ctx ends. The request counts as finished even when the
// confirmation fails; the error then says the acknowledgement may be lost.
func (r *Request) DoneSync(ctx context.Context) error {
	if !r.w.release(r) {
		return ErrFinished
	}
	if r.Ack == "" {
		return nil
	}
	if _, err := r.w.nc.RequestWithContext(ctx, r.Ack, ackAck); err != nil {
		return fmt.Errorf("worker: ack request %s: %w", r.RequestID, err)
	}
	return nil
}

func (r *Request) finish(body []byte, what string) error {
	if !r.w.release(r) {
		return ErrFinished
	}
	if r.Ack == "" {
		return nil
	}
	if err := r.w.nc.Publish(r.Ack, body); err != nil {
		return fmt.Errorf("worker: %s request %s: %w", what, r.RequestID, err)
	}
	return nil
}
