package wire

import "fmt"

// TraceFormat and TraceVersion name the trace format (docs/protocol.md,
// Trace records): a reader refuses a header with another format or a
// higher version.
const (
	TraceFormat  = "fairdispatch-trace"
	TraceVersion = 1
)

// The events of a trace record (TraceRecord.Event).
const (
	// TraceHeader opens a trace: the format, version and policy.
	TraceHeader = "header"
	// TraceArrive is a request taken in: its class, key and costs.
	TraceArrive = "arrive"
	// TraceDispatch is a worker's answer to a dispatch: Outcome is
	// "accepted", "refused", "timeout" or another handshake outcome.
	TraceDispatch = "dispatch"
	// TraceReject is a request rejected (dead-lettered): Outcome is the
	// error code.
	TraceReject = "reject"
)

// TraceRecord is one line of a trace (a file of JSON lines, or one message
// of the trace stream): the header, or one event about one request. It holds
// no request body and no header but those named here. Empty fields are left
// out.
type TraceRecord struct {
	// Event is TraceHeader, TraceArrive, TraceDispatch or TraceReject.
	Event string `json:"ev"`
	// T is when the event happened, in Unix nanoseconds (the dispatcher's clock).
	T int64 `json:"t"`

	// Format, Version, Policy and Revision are set on the header only.
	// Policy is the policy file's YAML text, "" when the dispatcher runs the
	// policy built from its flags (a simulation then needs a baseline
	// policy). Revision is the policy bucket's revision on a header written
	// when the dispatcher applied a live policy revision, and 0 on one
	// written at its start: a reader tells a restart from a revision by it.
	Format   string `json:"format,omitempty"`
	Version  int    `json:"version,omitempty"`
	Policy   string `json:"policy,omitempty"`
	Revision uint64 `json:"revision,omitempty"`

	// ID is the request id.
	ID string `json:"id,omitempty"`
	// Token is the subject's class token, from which a policy resolves the
	// class (arrive only).
	Token string `json:"token,omitempty"`
	// Class is the physical class the running policy resolved.
	Class string `json:"class,omitempty"`
	// Key is the fairness key within the class, "_" when the request has none.
	Key string `json:"key,omitempty"`
	// Published is when the request was published, in Unix nanoseconds (arrive only).
	Published int64 `json:"published,omitempty"`
	// ISL, Cached and Cost are the request's input tokens, cached tokens and
	// DRR cost (arrive only).
	ISL    uint64 `json:"isl,omitempty"`
	Cached uint64 `json:"cached,omitempty"`
	Cost   uint64 `json:"cost,omitempty"`
	// Worker and Rank are where the request was dispatched (dispatch only).
	Worker string `json:"worker,omitempty"`
	Rank   *int   `json:"rank,omitempty"`
	// Outcome is the handshake outcome (dispatch) or error code (reject).
	Outcome string `json:"outcome,omitempty"`
}

// CheckTraceHeader returns an error unless r is a header of a trace format
// and version this package reads.
func CheckTraceHeader(r TraceRecord) error {
	if r.Event != TraceHeader || r.Format != TraceFormat {
		return fmt.Errorf("not a trace header (want {\"ev\":%q,\"format\":%q,...})", TraceHeader, TraceFormat)
	}
	if r.Version < 1 || r.Version > TraceVersion {
		return fmt.Errorf("trace format version %d: this build reads versions 1 to %d", r.Version, TraceVersion)
	}
	return nil
}
