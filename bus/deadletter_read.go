package bus

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// The reading side of dead letters (docs/protocol.md, Dead letters): what
// DeadLetterer writes, ReadLetter reads back, for fairctl's dlq commands.

// Letter is one dead letter as read from the DLQ stream.
type Letter struct {
	Seq            uint64    `json:"stream_seq"`
	Time           time.Time `json:"time"`
	Class          string    `json:"class"`
	Error          string    `json:"error"`
	RequestID      string    `json:"request_id"`
	Message        string    `json:"message"`
	Subject        string    `json:"subject,omitempty"` // the request's own subject (Dispatch-Subject)
	Size           int       `json:"body_size"`
	BodyDropped    bool      `json:"body_dropped,omitempty"`
	HeadersDropped string    `json:"headers_dropped,omitempty"`
}

// ReadLetter reads the fields of the dead letter at stream sequence seq,
// stored at t on subject with header h and a body of size bytes. A letter
// without Dispatch-Class takes its class from its subject
// (<prefix>.dlq.<class>); a letter stored without its body
// (Dispatch-Body-Dropped) has the dropped body's size.
func ReadLetter(seq uint64, t time.Time, subject string, h nats.Header, size int) Letter {
	l := Letter{
		Seq: seq, Time: t.UTC(), Class: h.Get(wire.HeaderClass), Error: h.Get(wire.HeaderError),
		RequestID: h.Get(wire.HeaderRequestID), Message: h.Get(wire.HeaderErrorMessage),
		Subject: h.Get(wire.HeaderSubject), Size: size, HeadersDropped: h.Get(wire.HeaderHeadersDropped),
	}
	if l.Class == "" {
		l.Class = subject[strings.LastIndexByte(subject, '.')+1:]
	}
	if v := h.Get(wire.HeaderBodyDropped); v != "" {
		l.BodyDropped = true
		if n, err := strconv.Atoi(v); err == nil {
			l.Size = n
		}
	}
	return l
}

// letterHeaders are the headers DeadLetterer adds to a letter.
var letterHeaders = []string{wire.HeaderError, wire.HeaderErrorMessage, wire.HeaderRequestID, wire.HeaderClass,
	wire.HeaderHeadersDropped, wire.HeaderBodyDropped, wire.HeaderSubject}

// RequestHeader returns a copy of a dead letter's header h without what
// DeadLetterer added (its own headers, matched case-insensitively, and every
// Nats-* header): the request's own headers, as far as the letter kept them.
func RequestHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, v := range h {
		if isNatsHeader(k) || slices.ContainsFunc(letterHeaders, func(o string) bool { return strings.EqualFold(o, k) }) {
			continue
		}
		out[k] = slices.Clone(v)
	}
	return out
}

// isNatsHeader reports whether header name k belongs to NATS (starts with
// "Nats-", any case).
func isNatsHeader(k string) bool { return len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") }
