package bus

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// Fault classes. Every error that Handshaker.Send returns, every error that a
// dead letter's done function receives and every error of Publish and
// PublishOutcome wraps exactly one of them, so that callers branch with
// errors.Is on whose fault it is (docs/decisions.md, Whose fault is an error).
var (
	// ErrRequestFault: the request itself cannot be sent as it is (it is over
	// the server's max_payload once our headers are added, or it has a header
	// that NATS cannot carry). Retrying cannot help and no worker is to blame:
	// the request ends with an outcome and a dead letter.
	ErrRequestFault = errors.New("the request cannot be sent as it is")
	// ErrWorkerFault: the worker's subject cannot be published to. The worker
	// is to blame, as for a refusal.
	ErrWorkerFault = errors.New("the worker cannot be sent to")
	// ErrConnectionFault: the connection (or the server, or a component
	// shutting down) failed; a later attempt may succeed. Nobody is to blame.
	ErrConnectionFault = errors.New("the connection failed")
)

// Fault returns the fault class err wraps (ErrRequestFault, ErrWorkerFault
// or ErrConnectionFault), or nil for a nil error. An error that wraps none is
// the connection's: retrying later blames nobody.
func Fault(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRequestFault):
		return ErrRequestFault
	case errors.Is(err, ErrWorkerFault):
		return ErrWorkerFault
	}
	return ErrConnectionFault
}

// publishFault wraps a publish error of a request's copy (a dispatch or a
// dead letter) with its fault class: ErrRequestFault for what the message
// itself makes impossible, ErrConnectionFault for the rest.
func publishFault(err error) error {
	if err == nil {
		return nil
	}
	if requestPublishError(err) {
		return fmt.Errorf("%w: %w", ErrRequestFault, err)
	}
	return fmt.Errorf("%w: %w", ErrConnectionFault, err)
}

// requestPublishError reports publish errors that the message itself causes,
// which retrying the same message cannot fix.
func requestPublishError(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) ||
		errors.Is(err, nats.ErrBadHeaderMsg) ||
		errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum)
}

// UnresolvedClass is the DLQ subject token of a request whose class was not
// resolved and whose own subject token cannot be one (a literal "*" or ">"
// that a client without subject checks published).
const UnresolvedClass = "_"

// ValidToken reports whether t can be one literal subject token.
func ValidToken(t string) bool { return validToken(t) }

// HeaderNameOK reports whether NATS clients can send a header of this name:
// printable ASCII (33 to 126) except `"(),/:;<=>?@[\]{}`, the rule nats.go
// applies when it encodes headers (it fails the publish with
// nats.ErrBadHeaderMsg otherwise). A server stores whatever a producer sent,
// so a request can arrive with a header its dispatch copy cannot carry.
func HeaderNameOK(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 33 || c > 126 || strings.IndexByte("\"()/,:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// BadHeaderNames returns the names in h that NATS cannot send, sorted, or nil.
func BadHeaderNames(h nats.Header) []string {
	var bad []string
	for k := range h {
		if !HeaderNameOK(k) {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	return bad
}

// quoteNames renders header names for a message: quoted, ASCII only,
// comma-separated.
func quoteNames(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.QuoteToASCII(n)
	}
	return strings.Join(q, ", ")
}

// EncodedSize returns the bytes a message with these headers and body takes
// against the server's max_payload, as nats.go counts it.
func EncodedSize(h nats.Header, body []byte) int {
	n := len(body)
	if len(h) == 0 {
		return n
	}
	n += len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(textproto.TrimString(v)) + 4
		}
	}
	return n
}

// describeRequestFault explains why a message with hdr and body cannot be
// published on nc: the header names NATS cannot send, or its size against
// max_payload. A nil hdr is a compact dispatch frame (docs/protocol.md,
// Compact dispatch form), whose request body is the frame's. It returns ""
// when it finds neither.
func describeRequestFault(nc *nats.Conn, hdr nats.Header, body []byte) string {
	if bad := BadHeaderNames(hdr); len(bad) > 0 {
		return unsendableReason(bad)
	}
	size, limit := EncodedSize(hdr, body), nc.MaxPayload()
	if limit <= 0 || int64(size) <= limit {
		return ""
	}
	if hdr == nil {
		if _, b, err := wire.DecodeDispatch(body, new(wire.Dispatch)); err == nil {
			return fmt.Sprintf("the request is %d bytes as a compact dispatch (body %d bytes), over the server's max_payload of %d bytes",
				size, len(b), limit)
		}
	}
	return fmt.Sprintf("the request is %d bytes with the dispatch headers (body %d bytes), over the server's max_payload of %d bytes",
		size, len(body), limit)
}

// UnsendableHeaders returns the fault of a request with header names NATS
// cannot send (see HeaderNameOK), as Send returns it for the header form: the
// compact form could carry them, but a request's fate must not depend on
// the form of the worker chosen.
func UnsendableHeaders(names []string) error {
	names = slices.Sorted(slices.Values(names))
	return &RequestFault{Reason: unsendableReason(names), Err: nats.ErrBadHeaderMsg}
}

func unsendableReason(sorted []string) string {
	return "header name " + quoteNames(sorted) + " cannot be sent over NATS"
}
