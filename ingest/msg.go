package ingest

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// Msg is a request message as the dispatcher holds it: its subject, its
// JetStream acknowledgement subject (the reply), its headers packed into one
// string, its body, and the Acker that acknowledges it.
//
// The NATS client's message keeps its headers as a map of slices, one string
// per name and per value: about 400 bytes for the two or three headers of a
// typical request, plus the client's message struct and the jetstream wrapper.
// A Msg keeps the same headers in one string of about their wire size, and the
// decoded Headers and the request snapshot refer to substrings of it, so a
// held request costs one small allocation for its headers instead of a dozen
// (docs/bench.md, Memory per held request). The Msg is a value, embedded in
// whatever holds it.
type Msg struct {
	subject string
	reply   string
	hdr     string // packed; see pack
	data    []byte
	acks    Acker
}

// Acker sends the acknowledgements of JetStream messages, given their reply
// subjects (docs/protocol.md, After accepting). The consumer's Acker publishes
// them on its connection; tests record them.
type Acker interface {
	Ack(reply string) error                               // +ACK: done
	Nak(reply string) error                               // the hand-back: redeliver at once
	NakWithDelay(reply string, delay time.Duration) error // -NAK {"delay": ns}
	InProgress(reply string) error                        // +WPI: restart the ack wait
	Term(reply, reason string) error                      // +TERM <reason>: drop it; JetStream's advisory carries the reason
}

// ErrNoAcker is returned by the acknowledgements of a Msg without an Acker.
var ErrNoAcker = errors.New("ingest: message has no acker")

// NewMsg returns the Msg of a message with these subject, reply, headers and
// body, acknowledged through acks. h is packed (copied); data is kept as is.
func NewMsg(subject, reply string, h nats.Header, data []byte, acks Acker) Msg {
	return Msg{subject: subject, reply: reply, hdr: pack(h), data: data, acks: acks}
}

// Subject returns the subject the message was published to.
func (m *Msg) Subject() string { return m.subject }

// Token returns the last token of the subject: the class token
// (docs/design.md, Class resolution).
func (m *Msg) Token() string { return m.subject[strings.LastIndexByte(m.subject, '.')+1:] }

// Reply returns the message's JetStream acknowledgement subject.
func (m *Msg) Reply() string { return m.reply }

// Data returns the message body.
func (m *Msg) Data() []byte { return m.data }

// maxCopiedBody bounds the bodies OwnBody copies.
const maxCopiedBody = 32 << 10

// OwnBody moves a small body into an allocation of its own; call it when the
// request starts to wait. The NATS client receives headers and body into one
// buffer and slices the body out of it, so a held body keeps the raw header
// block (packed apart, in the Msg) alive in front of it, and its size rounds
// up with theirs: about 130 bytes per 1 KiB request (docs/bench.md, Memory per
// held request). A copy of up to 32 KiB costs well under a microsecond; beyond
// that the header block is under half a percent of the buffer and the body is
// kept as received. A request dispatched at once is never copied.
func (m *Msg) OwnBody() {
	if len(m.data) == 0 || len(m.data) > maxCopiedBody {
		return
	}
	m.data = append(make([]byte, 0, len(m.data)), m.data...)
}

// Ack acknowledges the message (+ACK).
func (m *Msg) Ack() error { return m.ack(Acker.Ack) }

// Nak hands the message back for redelivery at once.
func (m *Msg) Nak() error { return m.ack(Acker.Nak) }

// InProgress restarts the message's ack wait (+WPI).
func (m *Msg) InProgress() error { return m.ack(Acker.InProgress) }

// Term drops the message (+TERM, with reason when not empty): on the
// work-queue stream it is removed, and JetStream's terminated advisory
// carries the reason.
func (m *Msg) Term(reason string) error {
	if m.acks == nil {
		return ErrNoAcker
	}
	return m.acks.Term(m.reply, reason)
}

// NakWithDelay hands the message back for redelivery after delay.
func (m *Msg) NakWithDelay(delay time.Duration) error {
	if m.acks == nil {
		return ErrNoAcker
	}
	return m.acks.NakWithDelay(m.reply, delay)
}

func (m *Msg) ack(f func(Acker, string) error) error {
	if m.acks == nil {
		return ErrNoAcker
	}
	return f(m.acks, m.reply)
}

// Header returns the headers as a new map (for a dead letter or a test, not
// for the dispatch path: see CopyHeaders).
func (m *Msg) Header() nats.Header {
	if m.hdr == "" {
		return nil
	}
	r := m.entries()
	h := make(nats.Header)
	for r.More() {
		k, vs := r.Str(), make([]string, int(r.Uvarint()))
		for i := range vs {
			vs[i] = r.Str()
		}
		h[k] = vs
	}
	return h
}

// HeaderValues returns how many header values the message has (a name with
// two values counts twice): the room CopyHeaders needs.
func (m *Msg) HeaderValues() int {
	r := wire.StringReader{S: m.hdr}
	return int(r.Uvarint())
}

// CopyHeaders sets in dst every header of the message whose name skip does
// not report, each to a slice of vals (which must have room for
// HeaderValues()), and returns what is left of vals. With a reused dst it
// allocates nothing: vals is the caller's.
func (m *Msg) CopyHeaders(dst nats.Header, skip func(string) bool, vals []string) []string {
	r := m.entries()
	for r.More() {
		k, c := r.Str(), int(r.Uvarint())
		for i := range c {
			vals[i] = r.Str()
		}
		if !skip(k) {
			dst[k] = vals[:c:c]
			vals = vals[c:]
		}
	}
	return vals
}

// AppendHeaders appends to dst every header of the message whose name skip
// does not report, in the compact dispatch frame's layout
// (wire.AppendHeaderEntry), and returns dst. The packed form has that layout,
// so each header is one copy.
func (m *Msg) AppendHeaders(dst []byte, skip func(string) bool) []byte {
	r := m.entries()
	for r.More() {
		entry := r.S
		k, c := r.Str(), int(r.Uvarint())
		for range c {
			r.Str()
		}
		if !skip(k) {
			dst = append(dst, entry[:len(entry)-len(r.S)]...)
		}
	}
	return dst
}

// HeaderNamesWhere returns the header names f reports, nil (allocating
// nothing) when there are none.
func (m *Msg) HeaderNamesWhere(f func(string) bool) []string {
	var names []string
	r := m.entries()
	for r.More() {
		k, c := r.Str(), int(r.Uvarint())
		for range c {
			r.Str()
		}
		if f(k) {
			names = append(names, k)
		}
	}
	return names
}

// Decode decodes the message's request headers as Decode does its map. The
// strings of the result are substrings of the packed headers, except MsgID
// and Key, which are copies: they outlive the request (the scheduler keeps
// them for cost settlement for up to its settlement window, and a fairness
// key while it is tracked), and a substring would keep the whole packed
// headers alive with them, Dispatch-Block-Hashes (up to 96 KiB) included.
func (m *Msg) Decode() (Headers, error) {
	var s scan
	r := m.entries()
	for r.More() {
		k, c := r.Str(), int(r.Uvarint())
		if c == 0 {
			continue
		}
		s.add(k, r.Str())
		for range c - 1 {
			r.Str()
		}
	}
	d, err := s.decode()
	d.MsgID, d.Key = strings.Clone(d.MsgID), strings.Clone(d.Key)
	return d, err
}

// pack packs h into one string: the number of values, then for each name its
// length and bytes, its number of values, and each value's length and bytes,
// every number a uvarint: after the count, the layout of the compact dispatch
// frame's headers (wire.AppendHeaderEntry). A nats.Header has no order, so
// neither has the packed form.
func pack(h nats.Header) string {
	if len(h) == 0 {
		return ""
	}
	n, size := 0, 0
	for k, vs := range h {
		n += len(vs)
		size += 2*binaryLen(uint64(len(k))) + len(k)
		for _, v := range vs {
			size += binaryLen(uint64(len(v))) + len(v)
		}
	}
	b := make([]byte, 0, size+binaryLen(uint64(n)))
	b = wire.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		b = wire.AppendHeaderEntry(b, k, vs)
	}
	return string(b)
}

// binaryLen returns the length of x as a uvarint (over-estimating a name's
// value count is harmless: it only sizes the buffer).
func binaryLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// entries returns a reader at the first name of the packed headers, past
// their value count. (pack wrote them: the reader may trust them.)
func (m *Msg) entries() wire.StringReader {
	r := wire.StringReader{S: m.hdr}
	r.Uvarint()
	return r
}

// natsAcker acknowledges on a NATS connection, with hand-backs through
// HandBacks when there is one (confirmed by the server) and a plain -NAK when
// there is none. Its acknowledgements are those of the jetstream package's
// messages, byte for byte.
type natsAcker struct {
	nc *nats.Conn
	hb *HandBacks
}

var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
)

func (a natsAcker) Ack(reply string) error        { return a.publish(reply, ackAck) }
func (a natsAcker) InProgress(reply string) error { return a.publish(reply, ackProgress) }

func (a natsAcker) Nak(reply string) error {
	if a.hb != nil {
		return a.hb.Nak(reply)
	}
	return a.publish(reply, ackNak)
}

func (a natsAcker) Term(reply, reason string) error {
	if reason == "" {
		return a.publish(reply, []byte("+TERM"))
	}
	return a.publish(reply, []byte("+TERM "+reason))
}

func (a natsAcker) NakWithDelay(reply string, delay time.Duration) error {
	if delay <= 0 {
		return a.publish(reply, ackNak)
	}
	return a.publish(reply, []byte(`-NAK {"delay": `+strconv.FormatInt(delay.Nanoseconds(), 10)+`}`))
}

func (a natsAcker) publish(reply string, body []byte) error {
	if reply == "" {
		return errNoReply
	}
	return a.nc.Publish(reply, body)
}

var errNoReply = errors.New("ingest: message has no reply subject")
