package wire

import "strings"

// Header names of the protocol, spelt as docs/protocol.md spells them. Every
// Dispatch-* name is defined here once; a reader matches Dispatch-* names
// case-insensitively (docs/protocol.md, Request headers), a writer sends them
// in this casing.

// HeaderValue returns the first value of header name in h (a nats.Header),
// or "" when absent; see LookupHeader.
func HeaderValue(h map[string][]string, name string) string {
	v, _ := LookupHeader(h, name)
	return v
}

// LookupHeader returns the first value of header name in h (a nats.Header)
// and whether h has it, matching the name exactly first and then
// case-insensitively, as a reader matches Dispatch-* names; of several other
// casings, the one that sorts first byte-wise counts, never one picked at
// random. (The dispatcher refuses a request carrying a Dispatch-* header
// under two casings, so a dispatch holds one casing of each producer
// header.) Cost: O(1) for an exact match, else O(len(h)).
func LookupHeader(h map[string][]string, name string) (string, bool) {
	if v, ok := h[name]; ok && len(v) > 0 {
		return v[0], true
	}
	var key, val string
	found := false
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) && (!found || k < key) {
			key, val, found = k, v[0], true
		}
	}
	return val, found
}

// HeaderPrefix begins every header name of the protocol but Nats-Msg-Id:
// the Dispatch-* namespace, matched case-insensitively.
const HeaderPrefix = "Dispatch-"

// Request headers: what a producer may put on a request it publishes to
// <prefix>.req.<class> (docs/protocol.md, Request headers). All are optional.
const (
	HeaderMsgID           = "Nats-Msg-Id" // the request id and JetStream's dedupe key; matched exactly
	HeaderISLTokens       = "Dispatch-ISL-Tokens"
	HeaderCachedTokens    = "Dispatch-Cached-Tokens"
	HeaderWorkerOverlap   = "Dispatch-Worker-Overlap"
	HeaderStrictPriority  = "Dispatch-Strict-Priority"
	HeaderPriority        = "Dispatch-Priority"
	HeaderWorker          = "Dispatch-Worker"
	HeaderDPRank          = "Dispatch-DP-Rank" // also a dispatch header: the rank chosen
	HeaderAllowedWorkers  = "Dispatch-Allowed-Workers"
	HeaderRequiredTaints  = "Dispatch-Required-Taints"
	HeaderPreferredTaints = "Dispatch-Preferred-Taints"
	HeaderDeadlineMs      = "Dispatch-Deadline-Ms"
	HeaderReplyTo         = "Dispatch-Reply-To"
	HeaderFairnessKey     = "Dispatch-Fairness-Key"
	HeaderBlockHashes     = "Dispatch-Block-Hashes"
)

// Dispatch headers: what the dispatcher adds to a request it sends to
// <prefix>.work.<worker_id> in the header form (docs/protocol.md, Dispatch
// handshake), with HeaderDPRank. Any producer-sent variant of them is removed
// first.
const (
	HeaderRequestID = "Dispatch-Request-Id" // also on dead letters
	HeaderClass     = "Dispatch-Class"      // also on dead letters
	HeaderSeq       = "Dispatch-Seq"
	HeaderCost      = "Dispatch-Cost"
	HeaderQueuedMs  = "Dispatch-Queued-Ms"
	HeaderAck       = "Dispatch-Ack"
	HeaderAckWaitMs = "Dispatch-Ack-Wait-Ms"
)

// DispatchHeaders lists the eight headers of a header-form dispatch in the
// order of docs/protocol.md's table. The slice must not be modified.
var DispatchHeaders = []string{HeaderRequestID, HeaderClass, HeaderDPRank, HeaderSeq,
	HeaderCost, HeaderQueuedMs, HeaderAck, HeaderAckWaitMs}

// HeaderPrefillTokens is the prefill tokens the dispatcher booked on the
// chosen rank: the request's uncached tokens on that rank at dispatch
// (docs/protocol.md, Bookings and seen_seq). The dispatcher adds it, in both
// forms, only when it differs from HeaderCost (the arrival's DRR cost), and
// removes any producer-sent variant. A worker that reports bookings reads it
// first, then HeaderCost.
const HeaderPrefillTokens = "Dispatch-Prefill-Tokens"

// HeaderStatus is the header of a worker's answer to a dispatch
// (docs/protocol.md, Accepting and refusing): absent accepts, StatusBusy
// refuses; StatusMalformed refuses a dispatch the worker cannot read.
const (
	HeaderStatus    = "Dispatch-Status"
	StatusBusy      = "busy"
	StatusMalformed = "malformed"
)

// Dead-letter headers: what the dispatcher adds to a request it dead-letters
// to <prefix>.dlq.<class> (docs/protocol.md, Dead letters), with
// HeaderRequestID and HeaderClass.
const (
	HeaderError          = "Dispatch-Error"
	HeaderErrorMessage   = "Dispatch-Error-Message"
	HeaderBodyDropped    = "Dispatch-Body-Dropped"
	HeaderHeadersDropped = "Dispatch-Headers-Dropped"
	HeaderSubject        = "Dispatch-Subject"
)

// Response headers (docs/protocol.md, Responses): HeaderResponseTo and
// HeaderAPI are request headers a producer may set (the dispatcher validates
// the first, forwards both); the others are on the messages of a response,
// with HeaderRequestID.
const (
	// HeaderResponseTo is the producer's request header naming the literal
	// subject its response goes to (docs/protocol.md, Asking for a response).
	HeaderResponseTo = "Dispatch-Response-To"
	// HeaderAPI is the producer's request header saying which OpenAI endpoint
	// the body is a request for: APIChatCompletions or APICompletions
	// (docs/protocol.md, OpenAI-shaped requests).
	HeaderAPI = "Dispatch-Api"
	// HeaderResponse is on every message of the response path: the worker's
	// kind (MsgClaim, MsgChunk, MsgPing, MsgEnd) or the
	// producer's answer (AnswerGo, AnswerOK, AnswerCancel, AnswerTaken).
	HeaderResponse = "Dispatch-Response"
	// HeaderExecution is the worker's id of one execution of the request:
	// unique per worker process and dispatch, opaque to the producer.
	HeaderExecution = "Dispatch-Execution"
	// HeaderResponseSeq numbers the response: chunk n carries n (from 1), a
	// ping the number of chunks sent so far, the end marker chunks+1.
	HeaderResponseSeq = "Dispatch-Response-Seq"
	// HeaderResponseStatus is on the end marker: EndOK, EndFailed or EndCancelled.
	HeaderResponseStatus = "Dispatch-Response-Status"
)

// HeaderOutputTokens is a convention of this project's load generator and
// mock worker, outside the contract: the output tokens the mock engine
// generates for the request (docs/protocol.md, Worker side: the Go helper and
// the mock worker). The dispatcher forwards it like any producer header.
const HeaderOutputTokens = "Dispatch-Output-Tokens"

// Bounds of the request headers (docs/protocol.md, Request headers). A value
// outside them is malformed: the request is rejected as bad_request.
const (
	MaxTokens     = 1 << 40    // Dispatch-ISL-Tokens, Dispatch-Cached-Tokens, overlap tokens
	MaxStrict     = 1<<31 - 1  // Dispatch-Strict-Priority
	MaxJump       = 1e6        // Dispatch-Priority
	MaxWeight     = 1e6        // magnitude of a Dispatch-Preferred-Taints weight
	MaxRank       = 65535      // Dispatch-DP-Rank, and every data-parallel rank
	MaxDeadlineMs = 86_400_000 // Dispatch-Deadline-Ms (one day)
	MaxTokenLen   = 128        // bytes in a worker id or a taint
	MaxKeyLen     = 64         // bytes in a Dispatch-Fairness-Key
	// MaxSubjectLen bounds Dispatch-Reply-To and Dispatch-Response-To. A
	// NATS client's protocol line (PUB <subject> <reply> <size>) is at most
	// 4,096 bytes by default (nats-server's max_control_line), and a server
	// closes a connection that sends a longer one for good: nats.go does not
	// reconnect after that error.
	MaxSubjectLen = 1024
	// MaxListItems bounds the items of each list header: Dispatch-Worker-Overlap,
	// Dispatch-Allowed-Workers, Dispatch-Required-Taints and
	// Dispatch-Preferred-Taints.
	MaxListItems = 256
	// MaxValueBytes bounds the length in bytes of the value of Nats-Msg-Id and of
	// each Dispatch-* header but Dispatch-Block-Hashes, surrounding whitespace
	// included. Every valid value fits easily: the longest, a 256-item overlap
	// list, is under 37 KiB. The whole message, headers and body, is bounded by
	// the NATS server's max_payload.
	MaxValueBytes = 64 << 10
	// MaxHashValueBytes bounds the value of Dispatch-Block-Hashes instead of
	// MaxValueBytes: MaxHashes hashes take 87,382 bytes, and the rest leaves
	// room for optional whitespace.
	MaxHashValueBytes = 96 << 10
)

// TrimValue removes the spaces and tabs around a header value, which
// docs/protocol.md, Request headers, lets a producer leave there.
func TrimValue(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return s[i:j]
}

// ValidToken reports whether s is a worker id or a class token
// (docs/protocol.md, Names): 1 to MaxTokenLen bytes of [A-Za-z0-9_-], one NATS
// subject token.
func ValidToken(s string) bool { return tokenBytes.all(s, MaxTokenLen) }

// ValidTaint reports whether s is a taint (docs/protocol.md, Load report):
// 1 to MaxTokenLen bytes of [A-Za-z0-9_.:/-].
func ValidTaint(s string) bool { return taintBytes.all(s, MaxTokenLen) }

// ValidKey reports whether s is a fairness key (docs/protocol.md, Request
// headers: Dispatch-Fairness-Key): 1 to MaxKeyLen bytes of [A-Za-z0-9_.:@-].
func ValidKey(s string) bool { return keyBytes.all(s, MaxKeyLen) }

// The bytes of worker ids and class tokens, of taints and of fairness keys.
var (
	tokenBytes = newASCIISet(alnum + "_-")
	taintBytes = newASCIISet(alnum + "_.:/-")
	keyBytes   = newASCIISet(alnum + "_.:@-")
)

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// asciiSet is a set of ASCII bytes, one bit each.
type asciiSet [2]uint64

func newASCIISet(chars string) asciiSet {
	var set asciiSet
	for i := 0; i < len(chars); i++ {
		set[chars[i]>>6] |= 1 << (chars[i] & 63)
	}
	return set
}

// all reports whether s has 1 to max bytes, each in set.
func (set *asciiSet) all(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 128 || set[c>>6]&(1<<(c&63)) == 0 {
			return false
		}
	}
	return true
}
