package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go"

	"fairdispatch/caller"
)

// Error types of the OpenAI error shape, one per status class, after the
// error classes of the official clients (openai-node's BadRequestError,
// AuthenticationError, PermissionDeniedError, NotFoundError, ConflictError,
// RateLimitError, InternalServerError: the status picks the class, the type
// is informative).
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeConflict       = "conflict_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable"
	typeTimeout        = "timeout_error"
)

// apiError is one error answer: an HTTP status and the OpenAI error body
// {"error":{"message","type","param","code"}}.
type apiError struct {
	status     int
	typ, code  string
	param, msg string
	retryAfter int  // seconds; 0: no Retry-After
	noRetry    bool // x-should-retry: false
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// body is the JSON error object.
func (e *apiError) body() []byte {
	var param any
	if e.param != "" {
		param = e.param
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"error": map[string]any{
		"message": e.msg, "type": e.typ, "param": param, "code": e.code}})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// write sends e as the whole response.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.noRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(append(e.body(), '\n'))
}

// errRetryAfter is the Retry-After of 429 and 503 answers, in seconds.
const errRetryAfter = 1

// budgetRetryAfter is the Retry-After of a budget_exceeded rejection:
// ceil(retry_after_ms / 1000) seconds, from the outcome's details
// (docs/protocol.md, Error codes), at least 1.
func budgetRetryAfter(details map[string]any) int {
	ms, _ := details["retry_after_ms"].(float64) // a JSON number
	return max(1, int(math.Ceil(ms/1000)))
}

// fromCall maps an error of a call (caller's errors, the dispatcher's
// rejection codes) to its answer (docs/config.md, Gateway: errors).
func fromCall(err error) *apiError {
	var rej *caller.RejectedError
	var pe *caller.PublishError
	var br *caller.BrokenError
	switch {
	case errors.As(err, &rej):
		e := &apiError{code: rej.Code, msg: rej.Message}
		switch rej.Code {
		case "queue_full":
			e.status, e.typ, e.retryAfter = 429, typeRateLimit, errRetryAfter
		case "budget_exceeded":
			e.status, e.typ, e.retryAfter = 429, typeRateLimit, budgetRetryAfter(rej.Details)
		case "all_workers_overloaded", "pinned_worker_overloaded", "no_endpoints":
			e.status, e.typ, e.retryAfter = 503, typeUnavailable, errRetryAfter
		case "expired", "deadline_unreachable":
			e.status, e.typ = 504, typeTimeout
		case "bad_request", "pinned_worker_not_allowed":
			e.status, e.typ, e.noRetry = 400, typeInvalidRequest, true
		default:
			e.status, e.typ = 500, typeServer
		}
		return e
	case errors.As(err, &pe) && errors.Is(pe.Err, nats.ErrMaxPayload):
		// Retrying cannot help: the same body makes the same message.
		return &apiError{status: 413, typ: typeInvalidRequest, code: "body_too_large", noRetry: true,
			msg: "the request, with the headers the gateway adds (its block hashes), is over the NATS server's max_payload: send a smaller body"}
	case errors.As(err, &pe):
		msg := "the request was not accepted (JetStream did not store it); retrying it is safe"
		switch {
		case pe.Stored == caller.StoredNo:
		case pe.Cancelled:
			msg = "the request was not accepted (JetStream did not confirm it, and the gateway cancelled it): it will not run; retrying it is safe"
		case pe.Kept:
			msg = "the request was not accepted (JetStream did not confirm it): it may run; a retry with the same Idempotency-Key attaches to it and never runs it twice"
		default:
			msg = "the request was not accepted (JetStream did not confirm it, and its cancellation could not be sent): it may still run, and a retry may run it twice"
		}
		return &apiError{status: 503, typ: typeUnavailable, code: "not_accepted", msg: msg, retryAfter: errRetryAfter}
	case errors.As(err, &br):
		// Retryable: the client has seen none of it (a stream's break is
		// told in the stream, after its 200), and a new request runs anew.
		return &apiError{status: 502, typ: typeServer, code: "response_broken", msg: br.Error()}
	case errors.Is(err, caller.ErrCancelled):
		return &apiError{status: 500, typ: typeServer, code: "cancelled", msg: "the request was cancelled", noRetry: true}
	}
	return &apiError{status: 500, typ: typeServer, code: "internal_error", msg: err.Error()}
}

var (
	errUnauthorized = &apiError{status: 401, typ: typeAuthentication, code: "invalid_api_key",
		msg: "invalid API key: send Authorization: Bearer <key>", noRetry: true}
	errNotFoundRoute = &apiError{status: 404, typ: typeNotFound, code: "not_found", msg: "no such route"}
)
