package naming

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "dispatch"

// Durable is the name of the dispatcher's durable pull consumer on the request
// stream. It is the same for every prefix: a consumer is scoped by its stream.
const Durable = "dispatcher"

// MaxNameLen is JetStream's limit on stream names, in bytes (a key-value
// bucket is stored as the stream KV_<bucket>).
const MaxNameLen = 255

// ErrInvalidPrefix reports a subject prefix that is not a literal subject or
// would make a stream or bucket name NATS refuses.
var ErrInvalidPrefix = errors.New("naming: invalid subject prefix")

// Names are the NATS names of one deployment. The zero value is not useful;
// build it with New.
type Names struct {
	prefix       string
	reqStream    string
	dlqStream    string
	kvStream     string
	traceStream  string
	leaderBucket string
	policyBucket string
}

// New returns the names under prefix ("" means DefaultPrefix), or an error
// wrapping ErrInvalidPrefix that names the prefix and the first name it
// breaks.
func New(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !ValidSubject(prefix) {
		return Names{}, fmt.Errorf("%w %q: want one or more dot-separated subject tokens without wildcards or whitespace", ErrInvalidPrefix, prefix)
	}
	q := strings.NewReplacer(".", "_", "-", "_").Replace(prefix)
	upper, lower := strings.ToUpper(q), strings.ToLower(q)
	n := Names{
		prefix:    prefix,
		reqStream: upper + "_REQ",
		dlqStream: upper + "_DLQ",
		kvStream:  upper + "_KV",
	}
	n.traceStream = upper + "_TRACE"
	if lower == DefaultPrefix {
		n.leaderBucket, n.policyBucket = "fairdispatch_leader", "fairdispatch_policy"
	} else {
		n.leaderBucket, n.policyBucket = "fairdispatch_"+lower+"_leader", "fairdispatch_"+lower+"_policy"
	}
	for _, s := range []string{n.reqStream, n.dlqStream, n.kvStream, n.traceStream} {
		if why := badStream(s); why != "" {
			return Names{}, fmt.Errorf("%w %q: stream name %q %s", ErrInvalidPrefix, prefix, s, why)
		}
	}
	for _, b := range []string{n.leaderBucket, n.policyBucket} {
		if why := badBucket(b); why != "" {
			return Names{}, fmt.Errorf("%w %q: bucket name %q %s", ErrInvalidPrefix, prefix, b, why)
		}
	}
	// What the names let through must still be ASCII: the Kelvin sign's
	// lower case is "k", so it would share prefix k's buckets, with
	// streams of its own.
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return Names{}, fmt.Errorf("%w %q: byte 0x%02x at %d: want dot-separated tokens of [A-Za-z0-9_-]", ErrInvalidPrefix, prefix, c, i)
		}
	}
	return n, nil
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

// ReqStream returns "<Q>_REQ", the work-queue stream of the requests on ReqAll.
func (n Names) ReqStream() string { return n.reqStream }

// DLQStream returns "<Q>_DLQ", the limits stream of the dead letters on DLQAll.
func (n Names) DLQStream() string { return n.dlqStream }

// KVStream returns "<Q>_KV", the stream of the workers' KV cache events
// (docs/protocol.md, KV cache events).
func (n Names) KVStream() string { return n.kvStream }

// TraceStream returns "<Q>_TRACE", the limits stream of the traffic trace
// on Trace (docs/protocol.md, Trace records), created with --record-stream.
func (n Names) TraceStream() string { return n.traceStream }

// Trace returns "<prefix>.trace", where a recording dispatcher publishes its
// trace records.
func (n Names) Trace() string { return n.prefix + ".trace" }

// Durable returns the dispatcher's durable consumer on ReqStream, Durable.
func (n Names) Durable() string { return Durable }

// LeaderBucket returns the key-value bucket of the leader lease:
// "fairdispatch_leader" for the default prefix, else "fairdispatch_<q>_leader".
func (n Names) LeaderBucket() string { return n.leaderBucket }

// PolicyBucket returns the key-value bucket of the policy:
// "fairdispatch_policy" for the default prefix, else "fairdispatch_<q>_policy".
func (n Names) PolicyBucket() string { return n.policyBucket }

// Req returns "<prefix>.req.<class>", where producers publish requests.
func (n Names) Req(class string) string { return n.prefix + ".req." + class }

// ReqAll returns "<prefix>.req.*", the subjects of ReqStream.
func (n Names) ReqAll() string { return n.prefix + ".req.*" }

// Load returns "<prefix>.load.<worker>", where a worker reports its load.
func (n Names) Load(worker string) string { return n.prefix + ".load." + worker }

// LoadAll returns "<prefix>.load.*".
func (n Names) LoadAll() string { return n.prefix + ".load.*" }

// Work returns "<prefix>.work.<worker>", where requests are dispatched to a worker.
func (n Names) Work(worker string) string { return n.prefix + ".work." + worker }

// DLQ returns "<prefix>.dlq.<class>", where dead letters of a class are stored.
func (n Names) DLQ(class string) string { return n.prefix + ".dlq." + class }

// DLQAll returns "<prefix>.dlq.*", the subjects of DLQStream.
func (n Names) DLQAll() string { return n.prefix + ".dlq.*" }

// KV returns "<prefix>.kv.<worker>", where a worker publishes its KV cache
// events (docs/protocol.md, KV cache events).
func (n Names) KV(worker string) string { return n.prefix + ".kv." + worker }

// KVAll returns "<prefix>.kv.*", the subjects of KVStream.
func (n Names) KVAll() string { return n.prefix + ".kv.*" }

// KVSync returns "<prefix>.kvsync.<worker>", where the dispatcher asks a
// worker to resynchronise a rank (docs/protocol.md, Resynchronisation).
func (n Names) KVSync(worker string) string { return n.prefix + ".kvsync." + worker }

// Done returns "<prefix>.done.<worker>", where a worker publishes its
// completion records (docs/protocol.md, Completion records).
func (n Names) Done(worker string) string { return n.prefix + ".done." + worker }

// Cancel returns "<prefix>.cancel", where producers cancel requests by id
// (docs/protocol.md, Cancellation); every dispatcher subscribes to it.
func (n Names) Cancel() string { return n.prefix + ".cancel" }

// CancelWorker returns "<prefix>.cancel.<worker>", where the dispatcher tells
// a worker to stop a running request (docs/protocol.md, Cancellation).
func (n Names) CancelWorker(worker string) string { return n.prefix + ".cancel." + worker }

// DoneAll returns "<prefix>.done.*".
func (n Names) DoneAll() string { return n.prefix + ".done.*" }

// ValidToken reports whether t can be one literal subject token: non-empty,
// no '.', no wildcard, no whitespace or control characters.
func ValidToken(t string) bool {
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

// ValidSubject reports whether s is a literal subject one can publish to:
// non-empty dot-separated tokens as ValidToken wants them.
func ValidSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if !ValidToken(t) {
			return false
		}
	}
	return true
}

// badStream says why JetStream would refuse s as a stream name, or "".
func badStream(s string) string {
	if len(s) > MaxNameLen {
		return fmt.Sprintf("is %d bytes, over %d", len(s), MaxNameLen)
	}
	for _, r := range s {
		switch {
		case r == '.', r == '*', r == '>', r == '/', r == '\\', r <= ' ', r == 0x7f:
			return fmt.Sprintf("contains %q", r)
		}
	}
	return ""
}

// badBucket says why NATS would refuse b as a key-value bucket name, or "".
func badBucket(b string) string {
	if len("KV_"+b) > MaxNameLen {
		return fmt.Sprintf("is %d bytes, over %d (its stream is KV_%s)", len(b), MaxNameLen-len("KV_"), b)
	}
	for _, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Sprintf("contains %q: want [A-Za-z0-9_-]+", r)
		}
	}
	return ""
}
