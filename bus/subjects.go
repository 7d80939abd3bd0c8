package bus

import (
	"errors"
	"fmt"

	"fairdispatch/naming"
)

// Stream names of the default prefix (docs/protocol.md). Every other prefix
// has its own: use Subjects.ReqStream and Subjects.DLQStream, never these,
// outside tests of the default prefix.
const (
	// ReqStream is the default prefix's work-queue stream of requests on "dispatch.req.*".
	ReqStream = "DISPATCH_REQ"
	// DLQStream is the default prefix's limits-retention stream of dead letters on "dispatch.dlq.*".
	DLQStream = "DISPATCH_DLQ"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = naming.DefaultPrefix

// ErrInvalidSubject reports a subject, prefix or subject token that NATS would
// not accept where it is used.
var ErrInvalidSubject = errors.New("bus: invalid subject")

// Subjects are the wire subjects of docs/protocol.md and every other NATS
// name (streams, durable, buckets) of one prefix, as package naming derives
// them. Build it with NewSubjects. A Subjects is immutable and safe for
// concurrent use.
type Subjects = naming.Names

// NewSubjects returns the names under prefix ("" means DefaultPrefix). The
// prefix is one or more dot-separated tokens of [A-Za-z0-9_-] (package
// naming); a prefix that is not is refused with an error wrapping both
// ErrInvalidSubject and naming.ErrInvalidPrefix.
func NewSubjects(prefix string) (Subjects, error) {
	n, err := naming.New(prefix)
	if err != nil {
		return Subjects{}, fmt.Errorf("%w: %w", ErrInvalidSubject, err)
	}
	return n, nil
}

// validToken reports whether t can be one literal subject token.
func validToken(t string) bool { return naming.ValidToken(t) }

// validSubject reports whether s is a literal subject one can publish to.
func validSubject(s string) bool { return naming.ValidSubject(s) }
