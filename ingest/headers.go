package ingest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"fairdispatch/request"
	"fairdispatch/wire"
)

// Slots of the Dispatch-* headers, in the order of the docs/protocol.md, Request headers table; Decode
// parses (and reports the first malformed header) in this order.
const (
	hISL = iota
	hCached
	hOverlap
	hStrict
	hPriority
	hWorker
	hRank
	hAllowed
	hRequired
	hPreferred
	hDeadline
	hReplyTo
	hKey
	hHashes
	hResponseTo
	numHeaders
)

// names maps a slot to its header name.
var names = [numHeaders]string{
	wire.HeaderISLTokens, wire.HeaderCachedTokens, wire.HeaderWorkerOverlap, wire.HeaderStrictPriority,
	wire.HeaderPriority, wire.HeaderWorker, wire.HeaderDPRank, wire.HeaderAllowedWorkers,
	wire.HeaderRequiredTaints, wire.HeaderPreferredTaints, wire.HeaderDeadlineMs, wire.HeaderReplyTo,
	wire.HeaderFairnessKey, wire.HeaderBlockHashes, wire.HeaderResponseTo,
}

// Headers holds the decoded request headers: what the scheduler takes in,
// request.Arrival (whose message facts, ID, Ref, Token and Published, the
// queue actor fills), and the two headers only the actor uses. Zero values
// mean absent, unless a Has* flag says otherwise. Strings and list items are
// substrings of the header values as received (no copies); Hashes is decoded
// into a new slice. Bounds: wire.MaxTokens, wire.MaxStrict, ... (docs/protocol.md,
// Request headers).
type Headers struct {
	request.Arrival
	MsgID   string // Nats-Msg-Id (exact-case match); "" when absent or empty
	ReplyTo string // Dispatch-Reply-To: a literal NATS subject; "" when absent
	// ResponseTo is Dispatch-Response-To (docs/protocol.md, Responses): a
	// literal NATS subject, checked like ReplyTo; "" when absent. The
	// dispatcher only validates it: it travels with the producer's headers.
	ResponseTo string
}

// HeaderError names a malformed header (docs/protocol.md, Request headers: the request is rejected as
// bad_request, naming the header).
type HeaderError struct {
	Header string // canonical name from docs/protocol.md, Request headers, whatever case the producer used
	Value  string // the value as received, cut to maxErrValue bytes (then ending in "...")
	Reason string // what is wrong, e.g. `is not an unsigned integer`
}

// Error returns e.g. `header Dispatch-ISL-Tokens: "abc" is not an unsigned integer`.
func (e *HeaderError) Error() string {
	return fmt.Sprintf("header %s: %q %s", e.Header, e.Value, e.Reason)
}

// maxErrValue bounds the value quoted in a HeaderError, since the message travels
// in DLQ headers and outcomes.
const maxErrValue = 128

func headerErr(slot int, value, reason string) *HeaderError {
	return &HeaderError{Header: names[slot], Value: cut(value), Reason: reason}
}

// NewHeaderError returns the error naming header as malformed, for a check
// Decode cannot make (one that needs the dispatcher's configuration), with
// value cut as Decode cuts it.
func NewHeaderError(header, value, reason string) *HeaderError {
	return &HeaderError{Header: header, Value: cut(value), Reason: reason}
}

// Precedes reports whether e's header comes before header in the order
// Decode reports malformed headers in (Nats-Msg-Id, then the docs/protocol.md,
// Request headers table); a name it does not know comes last.
func (e *HeaderError) Precedes(header string) bool { return order(e.Header) < order(header) }

func order(header string) int {
	if header == wire.HeaderMsgID {
		return -1
	}
	for i, n := range names {
		if n == header {
			return i
		}
	}
	return numHeaders
}

func cut(s string) string {
	if len(s) <= maxErrValue {
		return s
	}
	return s[:maxErrValue] + "..."
}

// Decode decodes every header of docs/protocol.md, Request headers.
//
// Matching: Nats-Msg-Id matches exactly (it is JetStream's own header). Dispatch-*
// names match case-insensitively; Decode walks the keys once and classifies each
// with an ASCII case fold, so the cost is O(number of keys + total value length)
// and nothing is allocated unless a list header or Dispatch-Block-Hashes is present.
//
// Repeats: a name with several values counts its first value. A Dispatch-* header
// that arrives under two differently-cased names (a nats.Header keeps the case as
// sent) is malformed, whatever the values: the dispatcher forwards the producer's
// headers as they are, and a worker could read the casing the dispatcher did not
// check (docs/protocol.md, Request headers). A name present with no value at all is
// absent; a present but empty value is malformed (except Nats-Msg-Id, where empty
// means absent).
//
// Whitespace: spaces and tabs around a value, around each list item and around the
// `=` of a pair are ignored (HTTP-style optional whitespace); inside a token or a
// number they make it malformed.
//
// Errors: a malformed header yields a *HeaderError naming it. When several are
// malformed the first in docs/protocol.md, Request headers table order is reported. The returned Headers
// then still carries every header that did decode (in particular MsgID and
// ReplyTo); a malformed header leaves its fields at their zero values, except Pin,
// which is left unpinned when either Dispatch-Worker or Dispatch-DP-Rank is bad.
// Duplicate items inside one list are kept as sent.
//
// Bounds: a value of Nats-Msg-Id or of a Dispatch-* header longer than
// wire.MaxValueBytes (Dispatch-Block-Hashes: wire.MaxHashValueBytes), a list header with
// more than wire.MaxListItems items, and a Dispatch-Block-Hashes of more than
// wire.MaxHashes hashes, are
// malformed; both are checked before anything is parsed or allocated, so a
// hostile value costs at most one scan of its bytes. An oversized Nats-Msg-Id is
// reported under that name and left out (MsgID is then "", and the default
// request id applies); so is one that is not valid UTF-8, which no JSON record
// could name (a completion record, a cancellation, an outcome).
func Decode(h nats.Header) (Headers, error) {
	var s scan
	for k, v := range h {
		if len(v) > 0 {
			s.add(k, v[0])
		}
	}
	return s.decode()
}

// scan collects the headers Decode looks at, each name with its first value,
// in any order: Nats-Msg-Id, and the value of each Dispatch-* slot under the
// name that sorts first.
type scan struct {
	msgID    string
	hasMsgID bool
	keys     [numHeaders]string
	vals     [numHeaders]string
	present  uint32
	twice    uint32             // slots given under two casings
	others   [numHeaders]string // a slot's other casing
}

func (s *scan) add(k, v string) {
	if k == wire.HeaderMsgID {
		s.msgID, s.hasMsgID = v, true
		return
	}
	i := slotOf(k)
	if i < 0 {
		return
	}
	if s.present&(1<<i) != 0 {
		// Two casings: the first byte-wise is kept, so that the error
		// names the same two whatever the map's order.
		s.twice |= 1 << i
		if k > s.keys[i] {
			s.others[i] = max(s.others[i], k)
			return
		}
		s.others[i] = max(s.others[i], s.keys[i])
	}
	s.present |= 1 << i
	s.keys[i], s.vals[i] = k, v
}

// decode parses what s collected (see Decode).
func (s *scan) decode() (Headers, error) {
	d := Headers{Arrival: request.Arrival{Pin: request.Target{Rank: request.AnyRank}}}
	var first *HeaderError
	note := func(e *HeaderError) {
		if first == nil {
			first = e
		}
	}
	if s.hasMsgID {
		switch {
		case len(s.msgID) > wire.MaxValueBytes:
			note(&HeaderError{Header: wire.HeaderMsgID, Value: cut(s.msgID), Reason: tooLong})
		case !utf8.ValidString(s.msgID):
			// Every JSON record that names the request (completion
			// records, cancellations, outcomes) would carry another id.
			note(&HeaderError{Header: wire.HeaderMsgID, Value: cut(s.msgID), Reason: "is not valid UTF-8"})
		default:
			d.MsgID = s.msgID
		}
	}
	present, vals := s.present, &s.vals
	var oversize uint32
	if present == 0 {
		if first != nil {
			return d, first
		}
		return d, nil
	}
	// An oversized value is reported in its slot's place in table order, and
	// the slot is then treated as absent.
	for i := range numHeaders {
		if present&(1<<i) != 0 && (len(vals[i]) > maxValue(i) || s.twice&(1<<i) != 0) {
			present &^= 1 << i
			oversize |= 1 << i
		}
	}
	has := func(i int) bool { return present&(1<<i) != 0 }
	// big notes, in the slot's place in table order, a value refused before
	// it is parsed: given under two casings, or too long.
	big := func(i int) {
		switch {
		case s.twice&(1<<i) != 0:
			note(headerErr(i, vals[i], fmt.Sprintf("is given under two casings of the name (%s and %s): send it once", s.keys[i], s.others[i])))
		case oversize&(1<<i) != 0:
			note(headerErr(i, vals[i], longerThan(maxValue(i))))
		}
	}

	big(hISL)
	if has(hISL) {
		n, err := parseUint(hISL, vals[hISL], wire.MaxTokens)
		d.ISL = n
		if err != nil {
			note(err)
		}
	}
	big(hCached)
	if has(hCached) {
		n, err := parseUint(hCached, vals[hCached], wire.MaxTokens)
		d.Cached = n
		if err != nil {
			note(err)
		}
	}
	big(hOverlap)
	if has(hOverlap) {
		ov, err := parseOverlap(vals[hOverlap])
		d.Overlap = ov
		if err != nil {
			note(err)
		}
	}
	big(hStrict)
	if has(hStrict) {
		n, err := parseUint(hStrict, vals[hStrict], wire.MaxStrict)
		d.Strict = uint32(n)
		if err != nil {
			note(err)
		}
	}
	big(hPriority)
	if has(hPriority) {
		f, err := parseFloat(hPriority, vals[hPriority], 0, wire.MaxJump)
		d.Jump = f
		if err != nil {
			note(err)
		}
	}
	workerOK := false
	big(hWorker)
	if has(hWorker) {
		v := wire.TrimValue(vals[hWorker])
		if r := checkToken(v, wire.ValidToken, "worker id"); r != "" {
			note(headerErr(hWorker, vals[hWorker], r))
		} else {
			d.Pin.Worker = v
			workerOK = true
		}
	}
	big(hRank)
	if has(hRank) {
		n, err := parseUint(hRank, vals[hRank], wire.MaxRank)
		switch {
		case err != nil:
			note(err)
			d.Pin = request.Target{Rank: request.AnyRank}
		case !has(hWorker):
			note(headerErr(hRank, vals[hRank], "needs "+wire.HeaderWorker))
		case workerOK:
			d.Pin.Rank = int32(n)
		}
	}
	big(hAllowed)
	if has(hAllowed) {
		l, err := parseList(hAllowed, vals[hAllowed], wire.ValidToken, "worker id")
		d.Allowed = l
		if err != nil {
			note(err)
		}
	}
	big(hRequired)
	if has(hRequired) {
		l, err := parseList(hRequired, vals[hRequired], wire.ValidTaint, "taint")
		d.Required = l
		if err != nil {
			note(err)
		}
	}
	big(hPreferred)
	if has(hPreferred) {
		l, err := parsePreferred(vals[hPreferred])
		d.Preferred = l
		if err != nil {
			note(err)
		}
	}
	big(hDeadline)
	if has(hDeadline) {
		n, err := parseUint(hDeadline, vals[hDeadline], wire.MaxDeadlineMs)
		if err != nil {
			note(err)
		} else {
			d.DeadlineMs, d.HasDeadline = n, true
		}
	}
	big(hReplyTo)
	if has(hReplyTo) {
		v := wire.TrimValue(vals[hReplyTo])
		if r := checkSubject(v); r != "" {
			note(headerErr(hReplyTo, vals[hReplyTo], r))
		} else {
			d.ReplyTo = v
		}
	}
	big(hKey)
	if has(hKey) {
		v := wire.TrimValue(vals[hKey])
		if r := checkKey(v); r != "" {
			note(headerErr(hKey, vals[hKey], r))
		} else {
			d.Key = v
		}
	}
	big(hHashes)
	if has(hHashes) {
		hs, err := wire.DecodeHashes(nil, wire.TrimValue(vals[hHashes]))
		if err != nil {
			note(headerErr(hHashes, vals[hHashes], err.Error()))
		} else {
			d.Hashes = hs
		}
	}
	big(hResponseTo)
	if has(hResponseTo) {
		v := wire.TrimValue(vals[hResponseTo])
		if r := checkSubject(v); r != "" {
			note(headerErr(hResponseTo, vals[hResponseTo], r))
		} else {
			d.ResponseTo = v
		}
	}
	if first != nil {
		return d, first
	}
	return d, nil
}

// checkKey returns "" when s is a fairness key (wire.ValidKey: 1 to
// wire.MaxKeyLen bytes of [A-Za-z0-9_.:@-]), else the reason.
func checkKey(s string) string {
	switch {
	case s == "":
		return "is not a fairness key (empty)"
	case len(s) > wire.MaxKeyLen:
		return "is not a fairness key (longer than " + strconv.Itoa(wire.MaxKeyLen) + " bytes)"
	case !wire.ValidKey(s):
		return "is not a fairness key (invalid character)"
	}
	return ""
}

// maxValue returns the bound on the value length of a slot's header.
func maxValue(slot int) int {
	if slot == hHashes {
		return wire.MaxHashValueBytes
	}
	return wire.MaxValueBytes
}

// slotOf returns the slot of a Dispatch-* header name in any case, or -1.
func slotOf(k string) int {
	const p = len(wire.HeaderPrefix)
	if len(k) <= p || k[0]|0x20 != 'd' || !strings.EqualFold(k[:p], wire.HeaderPrefix) {
		return -1
	}
	rest := k[p:]
	for i, n := range names {
		if len(n)-p == len(rest) && strings.EqualFold(n[p:], rest) {
			return i
		}
	}
	return -1
}

// parseUint parses an unsigned decimal integer <= max without allocating. On
// error it returns 0 and a *HeaderError for slot.
func parseUint(slot int, raw string, max uint64) (uint64, *HeaderError) {
	n, r := uintValue(wire.TrimValue(raw), max)
	if r != "" {
		return 0, headerErr(slot, raw, r)
	}
	return n, nil
}

// uintValue parses s as an unsigned decimal integer <= max; it returns the reason
// when s is not one. Leading zeros are allowed; signs are not.
func uintValue(s string, max uint64) (uint64, string) {
	const notUint = "is not an unsigned integer"
	if s == "" {
		return 0, notUint
	}
	digits := s
	if s[0] == '-' {
		digits = s[1:]
	}
	if digits == "" {
		return 0, notUint
	}
	var n uint64
	over, zero := false, true
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, notUint
		}
		if c != '0' {
			zero = false
		}
		if !over {
			n = n*10 + uint64(c-'0')
			over = n > max // n <= max <= 2^40 before the step, so no overflow
		}
	}
	switch {
	case s[0] == '-' && !zero:
		return 0, "is negative"
	case s[0] == '-':
		return 0, notUint
	case over:
		return 0, "exceeds " + strconv.FormatUint(max, 10)
	}
	return n, ""
}

// parseFloat parses a finite float in [lo, hi]; -0 becomes 0.
func parseFloat(slot int, raw string, lo, hi float64) (float64, *HeaderError) {
	f, r := floatValue(wire.TrimValue(raw), lo, hi)
	if r != "" {
		return 0, headerErr(slot, raw, r)
	}
	return f, nil
}

func floatValue(s string, lo, hi float64) (float64, string) {
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !isRangeErr(err):
		return 0, "is not a number"
	case math.IsNaN(f) || math.IsInf(f, 0): // ErrRange comes with ±Inf
		return 0, "is not finite"
	case f < lo && lo == 0:
		return 0, "is negative"
	case f < lo:
		return 0, "is below " + strconv.FormatFloat(lo, 'g', -1, 64)
	case f > hi:
		return 0, "exceeds " + strconv.FormatFloat(hi, 'g', -1, 64)
	}
	if f == 0 {
		f = 0 // -0 becomes 0
	}
	return f, ""
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// checkToken returns "" when s is a name of the grammar valid (wire.ValidToken
// for worker ids, wire.ValidTaint for taints: 1 to wire.MaxTokenLen bytes of
// their characters), else the reason.
func checkToken(s string, valid func(string) bool, what string) string {
	switch {
	case s == "":
		return "is not a " + what + " (empty)"
	case len(s) > wire.MaxTokenLen:
		return "is not a " + what + " (longer than " + strconv.Itoa(wire.MaxTokenLen) + " bytes)"
	case !valid(s):
		return "is not a " + what + " (invalid character)"
	}
	return ""
}

// checkSubject returns "" when s is a literal NATS subject to publish to: at
// most wire.MaxSubjectLen bytes of non-empty tokens separated by dots, no
// whitespace or control characters, and no `*` or `>` (stricter than
// nats-server's IsValidLiteralSubject, which allows them inside a longer
// token: the dispatcher and the workers publish to no such subject); else the
// reason.
func checkSubject(s string) string {
	switch {
	case s == "":
		return "is not a subject (empty)"
	case len(s) > wire.MaxSubjectLen:
		return "is not a subject (longer than " + strconv.Itoa(wire.MaxSubjectLen) + " bytes)"
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			switch {
			case s[i] <= ' ' || s[i] == 0x7f:
				return "is not a subject (whitespace or control character)"
			case s[i] == '*' || s[i] == '>':
				return "is not a literal subject (wildcard)"
			}
			continue
		}
		if i == start {
			return "is not a subject (empty token)"
		}
		start = i + 1
	}
	return ""
}

// items returns the number of comma-separated items in s.
func items(s string) int { return strings.Count(s, ",") + 1 }

// The reasons of the size bounds.
var (
	tooLong = longerThan(wire.MaxValueBytes)
	tooMany = "has more than " + strconv.Itoa(wire.MaxListItems) + " items"
)

func longerThan(n int) string { return "is longer than " + strconv.Itoa(n) + " bytes" }

// checkItems returns the reason when s has more than wire.MaxListItems items, else
// "". It runs before the list is allocated, so that a value of commas cannot
// make Decode allocate more than wire.MaxListItems items.
func checkItems(s string) string {
	if n := items(s); n > wire.MaxListItems {
		return tooMany + " (" + strconv.Itoa(n) + ")"
	}
	return ""
}

// nextItem splits the next comma-separated item off s, trimmed.
func nextItem(s string) (item, rest string) {
	if i := strings.IndexByte(s, ','); i >= 0 {
		return wire.TrimValue(s[:i]), s[i+1:]
	}
	return wire.TrimValue(s), ""
}

// itemReason describes what is wrong with item n (1-based).
func itemReason(n int, item, reason string) string {
	if item == "" {
		return "has an empty item (item " + strconv.Itoa(n) + ")"
	}
	return fmt.Sprintf("has an invalid item %d %q: %s", n, cut(item), reason)
}

// parseList parses "tok,tok,..." with every token in set.
func parseList(slot int, raw string, valid func(string) bool, what string) ([]string, *HeaderError) {
	s := wire.TrimValue(raw)
	if r := checkItems(s); r != "" {
		return nil, headerErr(slot, raw, r)
	}
	out := make([]string, 0, items(s))
	for n := 1; ; n++ {
		item, rest := nextItem(s)
		if item == "" {
			return nil, headerErr(slot, raw, itemReason(n, "", ""))
		}
		if r := checkToken(item, valid, what); r != "" {
			return nil, headerErr(slot, raw, itemReason(n, item, r))
		}
		out = append(out, item)
		if !moreItems(s) {
			break
		}
		s = rest
	}
	return out, nil
}

// splitPair splits "a=b" around its first '=', trimmed; ok is false without '='.
func splitPair(item string) (k, v string, ok bool) {
	i := strings.IndexByte(item, '=')
	if i < 0 {
		return item, "", false
	}
	return wire.TrimValue(item[:i]), wire.TrimValue(item[i+1:]), true
}

// parseOverlap parses Dispatch-Worker-Overlap: "id=tokens,...".
func parseOverlap(raw string) ([]request.Overlap, *HeaderError) {
	s := wire.TrimValue(raw)
	if r := checkItems(s); r != "" {
		return nil, headerErr(hOverlap, raw, r)
	}
	out := make([]request.Overlap, 0, items(s))
	for n := 1; ; n++ {
		item, rest := nextItem(s)
		if item == "" {
			return nil, headerErr(hOverlap, raw, itemReason(n, "", ""))
		}
		id, tok, ok := splitPair(item)
		if !ok {
			return nil, headerErr(hOverlap, raw, itemReason(n, item, "is not id=tokens"))
		}
		if r := checkToken(id, wire.ValidToken, "worker id"); r != "" {
			return nil, headerErr(hOverlap, raw, itemReason(n, item, "worker "+r))
		}
		t, r := uintValue(tok, wire.MaxTokens)
		if r != "" {
			return nil, headerErr(hOverlap, raw, itemReason(n, item, "tokens "+r))
		}
		out = append(out, request.Overlap{Worker: id, Tokens: t})
		if !moreItems(s) {
			break
		}
		s = rest
	}
	return out, nil
}

// parsePreferred parses Dispatch-Preferred-Taints: "t=w,t,...".
func parsePreferred(raw string) ([]request.Taint, *HeaderError) {
	s := wire.TrimValue(raw)
	if r := checkItems(s); r != "" {
		return nil, headerErr(hPreferred, raw, r)
	}
	out := make([]request.Taint, 0, items(s))
	for n := 1; ; n++ {
		item, rest := nextItem(s)
		if item == "" {
			return nil, headerErr(hPreferred, raw, itemReason(n, "", ""))
		}
		name, w, hasW := splitPair(item)
		if r := checkToken(name, wire.ValidTaint, "taint"); r != "" {
			return nil, headerErr(hPreferred, raw, itemReason(n, item, "taint "+r))
		}
		weight := 1.0
		if hasW {
			f, r := floatValue(w, -wire.MaxWeight, wire.MaxWeight)
			if r != "" {
				return nil, headerErr(hPreferred, raw, itemReason(n, item, "weight "+r))
			}
			weight = f
		}
		out = append(out, request.Taint{Name: name, Weight: weight})
		if !moreItems(s) {
			break
		}
		s = rest
	}
	return out, nil
}

// moreItems reports whether s has an item after its first.
func moreItems(s string) bool { return strings.IndexByte(s, ',') >= 0 }
