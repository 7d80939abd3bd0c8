package caller

import (
	"errors"
	"fmt"
)

// Stored says whether a request whose publication failed may be in the stream.
type Stored int

const (
	// StoredNo: the request was not stored (no stream answered, the stream
	// refused it, or the client could not send it).
	StoredNo Stored = iota
	// StoredUnknown: JetStream did not answer in time or the connection
	// closed while the answer was awaited; the request may be stored.
	StoredUnknown
)

// PublishError is Start's error: JetStream did not confirm the request, so it
// was not accepted. With StoredUnknown and Request.KeepUnconfirmed false,
// Start publishes a cancellation of the request id, so that it never runs;
// Cancelled says whether that publication reached the server (it cannot on
// a closed connection, nor is it known to while the connection reconnects:
// the request may then run); Kept that none was sent because
// the request asked to be kept (Request.KeepUnconfirmed).
type PublishError struct {
	ID        string
	Stored    Stored
	Cancelled bool
	Kept      bool
	Err       error
}

func (e *PublishError) Error() string {
	what := "not stored"
	if e.Stored == StoredUnknown {
		what = "not confirmed"
	}
	return fmt.Sprintf("caller: request %s %s: %v", e.ID, what, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// RejectedError is a rejected outcome (docs/protocol.md, Outcomes): the
// dispatcher dead-lettered the request with an error code (docs/protocol.md,
// Error codes).
type RejectedError struct {
	ID      string
	Class   string
	Code    string
	Message string
	Details map[string]any
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("caller: request %s rejected: %s: %s", e.ID, e.Code, e.Message)
}

// BrokenError says that a response broke off after its first chunk: a gap in
// the chunk sequence, a lost last chunk, silence from the worker, or a reader
// too slow. The request is not run again (a caller cannot take back chunks it
// has seen).
type BrokenError struct {
	ID     string
	Chunks int
	Reason string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("caller: the response to %s broke off after %d chunks: %s; it is not run again", e.ID, e.Chunks, e.Reason)
}

// ErrCancelled is Recv's error after Cancel or Close, or when the request was
// cancelled elsewhere (a cancelled outcome).
var ErrCancelled = errors.New("caller: request cancelled")
