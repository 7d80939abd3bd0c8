package bus

import (
	"errors"
	"fmt"
	"strings"
)

// Stream names (docs/protocol.md). They do not depend on the subject prefix.
const (
	// ReqStream is the work-queue stream that holds requests on "<prefix>.req.*".
	ReqStream = "DISPATCH_REQ"
	// DLQStream is the limits-retention stream that holds dead letters on "<prefix>.dlq.*".
	DLQStream = "DISPATCH_DLQ"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "dispatch"

// ErrInvalidSubject reports a subject, prefix or subject token that NATS would
// not accept where it is used.
var ErrInvalidSubject = errors.New("bus: invalid subject")

// Subjects builds the wire subjects of docs/protocol.md for one prefix. The zero value is
// not useful; build it with NewSubjects. A Subjects is immutable and safe for
// concurrent use.
type Subjects struct {
	prefix string
}

// NewSubjects returns the subjects under prefix ("" means DefaultPrefix). The
// prefix is one or more dot-separated tokens without wildcards or whitespace.
func NewSubjects(prefix string) (Subjects, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !validSubject(prefix) {
		return Subjects{}, fmt.Errorf("%w: prefix %q", ErrInvalidSubject, prefix)
	}
	return Subjects{prefix: prefix}, nil
}

// Prefix returns the subject prefix.
func (s Subjects) Prefix() string { return s.prefix }

// Req returns "<prefix>.req.<class>", where producers publish requests.
func (s Subjects) Req(class string) string { return s.prefix + ".req." + class }

// ReqAll returns "<prefix>.req.*", the subjects of ReqStream.
func (s Subjects) ReqAll() string { return s.prefix + ".req.*" }

// Load returns "<prefix>.load.<worker>", where a worker reports its load.
func (s Subjects) Load(worker string) string { return s.prefix + ".load." + worker }

// LoadAll returns "<prefix>.load.*".
func (s Subjects) LoadAll() string { return s.prefix + ".load.*" }

// Work returns "<prefix>.work.<worker>", where requests are dispatched to a worker.
func (s Subjects) Work(worker string) string { return s.prefix + ".work." + worker }

// DLQ returns "<prefix>.dlq.<class>", where dead letters of a class are stored.
func (s Subjects) DLQ(class string) string { return s.prefix + ".dlq." + class }

// DLQAll returns "<prefix>.dlq.*", the subjects of DLQStream.
func (s Subjects) DLQAll() string { return s.prefix + ".dlq.*" }

// validToken reports whether t can be one literal subject token: non-empty, no
// '.', no wildcard, no whitespace or control characters.
func validToken(t string) bool {
	if t == "" {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c == '.', c == '*', c == '>', c <= ' ', c == 0x7f:
			return false
		}
	}
	return true
}

// validSubject reports whether s is a literal subject one can publish to.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if !validToken(t) {
			return false
		}
	}
	return true
}
