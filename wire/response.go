package wire

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The kinds of message a worker sends on the response subject
// (HeaderResponse; docs/protocol.md, Messages of a response).
const (
	// MsgClaim asks the producer whether this execution may respond; a
	// NATS request, sent after accepting and before any work.
	MsgClaim = "claim"
	// MsgChunk is one part of the response, in order; a plain publish.
	MsgChunk = "chunk"
	// MsgPing keeps the response alive and asks whether anyone still
	// listens; a NATS request, at least every PingInterval.
	MsgPing = "ping"
	// MsgEnd closes the response with its status; a NATS request.
	MsgEnd = "end"
)

// The producer's answers (HeaderResponse of its reply; docs/protocol.md,
// What a worker does with each answer). A worker reads any other value, or a
// reply without the header, as AnswerGo to a claim and AnswerOK to a ping.
const (
	// AnswerGo answers a claim: this execution is the one; stream.
	AnswerGo = "go"
	// AnswerOK answers a ping (go on) or an end marker (received).
	AnswerOK = "ok"
	// AnswerCancel answers a claim or a ping: the request is over (the caller
	// cancelled it or went away, or its response finished or broke off). The
	// worker stops, ends a claimed response with EndCancelled, and drops the
	// request (+TERM).
	AnswerCancel = "cancel"
	// AnswerTaken answers a claim or a ping: another execution of the request
	// has the response. The worker stops and sends nothing more, neither to the
	// producer nor to the request's Dispatch-Ack subject: the other execution
	// holds the message.
	AnswerTaken = "taken"
)

// The statuses of an end marker (HeaderResponseStatus and ResponseEnd.Status).
// EndOK and EndFailed are the completion record's StatusOK and StatusFailed.
const (
	EndOK        = StatusOK
	EndFailed    = StatusFailed
	EndCancelled = StatusCancelled
)

// StatusCancelled is the status of a request that was cancelled: in an
// outcome (the dispatcher removed it before any worker accepted it,
// docs/protocol.md, Outcomes), in an end marker, and in a completion record.
const StatusCancelled = "cancelled"

// The values of HeaderAPI (docs/protocol.md, OpenAI-shaped requests).
const (
	APIChatCompletions = "chat.completions"
	APICompletions     = "completions"
)

// Timing of the response path (docs/protocol.md, Timeouts and bounds).
const (
	// AnswerTimeoutMs is how long a worker waits for the answer to one claim,
	// ping or end marker.
	AnswerTimeoutMs = 1000
	// PingIntervalMs is the longest a worker goes between two pings of an open
	// response.
	PingIntervalMs = 1000
	// SilenceMs is how long a producer waits, once it has seen a chunk, for
	// the next message of the execution before it declares the response broken
	// off: three ping intervals.
	SilenceMs = 3 * PingIntervalMs
	// ClaimAttempts and EndAttempts bound the attempts of a claim and of an
	// end marker; PingMisses is how many pings in a row may go unanswered
	// before the worker stops.
	ClaimAttempts = 3
	EndAttempts   = 3
	PingMisses    = 3
	// ClaimRetryMs is how long a worker waits after a claim found no responders
	// before it claims again.
	ClaimRetryMs = 500
)

// MaxExecutionLen bounds HeaderExecution's value, in bytes.
const MaxExecutionLen = 256

// Usage is what the engine used for the request, in tokens: OpenAI's usage
// without the totals (docs/protocol.md, The end marker).
type Usage struct {
	// PromptTokens is the input length.
	PromptTokens uint64 `json:"prompt_tokens"`
	// CompletionTokens is the output length.
	CompletionTokens uint64 `json:"completion_tokens"`
	// CachedTokens is the part of the input found in the engine's prefix
	// cache; omitted when 0.
	CachedTokens uint64 `json:"cached_tokens,omitempty"`
}

// ResponseEnd is the body of an end marker (docs/protocol.md, The end marker).
type ResponseEnd struct {
	// Status is EndOK, EndFailed or EndCancelled; the end marker's
	// Dispatch-Response-Status header has the same value.
	Status string `json:"status"`
	// Chunks is the number of chunks sent before the end marker.
	Chunks uint64 `json:"chunks"`
	// FinishReason is the engine's reason to stop ("stop", "length", ...);
	// omitted when there is none.
	FinishReason string `json:"finish_reason,omitempty"`
	// Usage is the engine's token usage; nil when not known.
	Usage *Usage `json:"usage,omitempty"`
	// Error says why the request failed or was cancelled; omitted when ok.
	Error string `json:"error,omitempty"`
	// Refused, with EndFailed only: the engine refused the request as it is
	// (a prompt over the model's context, a parameter out of range: an
	// OpenAI-compatible engine's 4xx), so running it again cannot help; the
	// gateway answers 400. Omitted when false.
	Refused bool `json:"refused,omitempty"`
}

// MaxEndBytes bounds an end marker's body.
const MaxEndBytes = 4096

// validEndStatus reports whether s is a status of an end marker.
func validEndStatus(s string) bool { return s == EndOK || s == EndFailed || s == EndCancelled }

// MarshalResponseEnd returns e's JSON, without a trailing newline or HTML
// escaping. It refuses an unknown status and Refused with a status but
// EndFailed; a body over MaxEndBytes has its Error, then its FinishReason (an
// engine's, passed through), cut to fit, each at a character's boundary.
func MarshalResponseEnd(e ResponseEnd) ([]byte, error) {
	if !validEndStatus(e.Status) {
		return nil, fmt.Errorf("response end: unknown status %q", e.Status)
	}
	if e.Refused && e.Status != EndFailed {
		return nil, fmt.Errorf("response end: refused with status %q (only %q)", e.Status, EndFailed)
	}
	for {
		b, err := Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("response end: %w", err)
		}
		switch {
		case len(b) <= MaxEndBytes:
			return b, nil
		case e.Error != "":
			e.Error = halve(e.Error)
		case e.FinishReason != "":
			e.FinishReason = halve(e.FinishReason)
		default:
			return nil, fmt.Errorf("response end: %d bytes, over %d", len(b), MaxEndBytes)
		}
	}
}

// halve returns the first half of s, cut back to a character's boundary.
func halve(s string) string {
	n := len(s) / 2
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ParseResponseEnd decodes an end marker's body and checks it: at most
// MaxEndBytes, a JSON object with a known status. Unknown fields are ignored,
// and so is refused with a status but failed.
func ParseResponseEnd(b []byte) (ResponseEnd, error) {
	var e ResponseEnd
	if err := unmarshalBounded("response end", b, MaxEndBytes, &e); err != nil {
		return e, err
	}
	if !validEndStatus(e.Status) {
		return e, fmt.Errorf("response end: unknown status %q", e.Status)
	}
	e.Refused = e.Refused && e.Status == EndFailed
	return e, nil
}

// ParseResponseSeq parses a Dispatch-Response-Seq value: an unsigned decimal
// integer (surrounding spaces and tabs ignored).
func ParseResponseSeq(s string) (uint64, error) {
	n, err := strconv.ParseUint(TrimValue(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("header %s: %q is not an unsigned integer", HeaderResponseSeq, s)
	}
	return n, nil
}
