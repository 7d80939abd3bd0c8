package wire

import (
	"bytes"
	"encoding/json"
)

// DecodeLoadReport decodes one load report into *w, which it overwrites, with
// the result and the error json.Unmarshal gives into a zero LoadReport.
//
// A dispatcher decodes a report for about every dispatch once the fleet has
// thousands of worker ids, and encoding/json's reflection was a third of its
// CPU there (docs/bench.md, Scale curves). So the reports workers actually send
// take a hand-written path: field names as written in LoadReport, strings of
// printable ASCII without escapes, integers without sign, fraction or
// exponent, unknown fields of any JSON value. Anything else (escapes,
// non-ASCII strings, a field name differing only in case, a null inside an
// array, a field of a list given twice, any syntax or type error) is decoded
// again by encoding/json, so its answer, errors included, is the reference in
// every case. FuzzDecodeLoadReport holds the two to the same results.
func DecodeLoadReport(data []byte, w *LoadReport) error {
	if decodeReportFast(data, w) {
		return nil
	}
	*w = LoadReport{}
	return json.Unmarshal(data, w)
}

// reportScalars holds the pointed-to values of one decoded report, so that a
// report costs one allocation for them rather than one per field.
type reportScalars struct {
	workerID              string
	dpStart, dpSize       uint32
	maxBatched, maxActive uint64
	ttl, seen             uint64
}

// decodeReportFast decodes data into *w if it is in the common form described
// at DecodeLoadReport and reports whether it was. When it returns false, *w
// holds anything.
func decodeReportFast(data []byte, w *LoadReport) bool {
	*w = LoadReport{}
	s := &scanner{b: data}
	var vals *reportScalars
	scalars := func() *reportScalars {
		if vals == nil {
			vals = new(reportScalars)
		}
		return vals
	}
	var sawTaints, sawRanks bool
	return s.object(func(key []byte) (ok bool) {
		switch string(key) {
		case "worker_id":
			var v []byte
			if v, ok = s.stringPtr(&w.WorkerID); ok && v != nil {
				p := scalars()
				p.workerID = string(v)
				w.WorkerID = &p.workerID
			}
		case "data_parallel_start_rank":
			ok = uintPtr(s, &w.DPStart, &scalars().dpStart, 32)
		case "data_parallel_size":
			ok = uintPtr(s, &w.DPSize, &scalars().dpSize, 32)
		case "max_num_batched_tokens":
			ok = uintPtr(s, &w.MaxBatched, &scalars().maxBatched, 64)
		case "max_active_requests":
			ok = uintPtr(s, &w.MaxActive, &scalars().maxActive, 64)
		case "ttl_ms":
			ok = uintPtr(s, &w.TTLms, &scalars().ttl, 64)
		case "seen_seq":
			ok = uintPtr(s, &w.SeenSeq, &scalars().seen, 64)
		case "total_kv_blocks":
			ok = s.uint64Value(&w.TotalKV)
		case "compact_dispatch":
			ok = s.uint64Value(&w.CompactDispatch)
		case "draining":
			ok = s.boolValue(&w.Draining)
		case "preempt":
			ok = s.boolValue(&w.Preempt)
		case "instance":
			ok = s.stringValue(&w.Instance)
		case "taints":
			ok = !sawTaints && list(s, &w.Taints, func() (string, bool) {
				b, ok := s.plainString()
				return string(b), ok
			})
			sawTaints = true
		case "ranks":
			ok = !sawRanks && list(s, &w.Ranks, func() (r RankLoad, ok bool) {
				ok = s.rank(&r)
				return r, ok
			})
			sawRanks = true
		default:
			ok = !foldsTo(key, reportFields) && s.skip(0)
		}
		return ok
	}) && s.end()
}

var reportFields = []string{"worker_id", "data_parallel_start_rank", "data_parallel_size",
	"max_num_batched_tokens", "total_kv_blocks", "max_active_requests", "taints", "draining",
	"ttl_ms", "instance", "seen_seq", "ranks", "compact_dispatch", "preempt"}

var rankFields = []string{"dp_rank", "active_prefill_tokens", "active_decode_blocks",
	"kv_used_blocks", "active_requests"}

// foldsTo reports whether key equals one of names but for ASCII case, which
// encoding/json would match to that field and this decoder does not.
func foldsTo(key []byte, names []string) bool {
	for _, n := range names {
		if len(n) == len(key) && bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// object reads an object whose keys are plain strings, calling field with
// each key to read the member's value; it reports false when field does.
func (s *scanner) object(field func(key []byte) bool) bool {
	if !s.take('{') {
		return false
	}
	if s.take('}') {
		return true
	}
	for {
		key, ok := s.plainString()
		if !ok || !s.take(':') || !field(key) {
			return false
		}
		if s.take(',') {
			continue
		}
		return s.take('}')
	}
}

// list reads an array into *out, elem reading each element, or null, which
// sets *out to nil; an empty array gives an empty list, not nil.
func list[T any](s *scanner, out *[]T, elem func() (T, bool)) bool {
	if s.null() {
		*out = nil
		return true
	}
	if !s.take('[') {
		return false
	}
	l := []T{}
	if !s.take(']') {
		for {
			v, ok := elem()
			if !ok {
				return false
			}
			l = append(l, v)
			if s.take(',') {
				continue
			}
			if !s.take(']') {
				return false
			}
			break
		}
	}
	*out = l
	return true
}

func (s *scanner) rank(r *RankLoad) bool {
	return s.object(func(key []byte) (ok bool) {
		switch string(key) {
		case "dp_rank":
			if s.null() {
				return true
			}
			v, ok := s.uint(32)
			r.Rank = uint32(v)
			return ok
		case "active_prefill_tokens":
			return s.uint64Value(&r.ActivePrefillTokens)
		case "active_decode_blocks":
			return s.uint64Value(&r.ActiveDecodeBlocks)
		case "kv_used_blocks":
			return s.uint64Value(&r.KVUsedBlocks)
		case "active_requests":
			return s.uint64Value(&r.ActiveRequests)
		default:
			return !foldsTo(key, rankFields) && s.skip(0)
		}
	})
}

// scanner reads JSON from b at i. Its methods skip leading white space, and
// those returning a bool report false for anything outside the common form,
// with i then anywhere.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// take consumes c if it comes next.
func (s *scanner) take(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// literal consumes lit (true, false or null) if it comes next.
func (s *scanner) literal(lit string) bool {
	s.space()
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

func (s *scanner) null() bool { return s.literal("null") }

// plainString reads a string of printable ASCII without escapes and returns
// its bytes, which alias b.
func (s *scanner) plainString() ([]byte, bool) {
	if !s.take('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// uint reads a JSON integer without sign, fraction or exponent that fits in
// bits bits.
func (s *scanner) uint(bits uint) (uint64, bool) {
	s.space()
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		d := uint64(s.b[s.i] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
		s.i++
	}
	n := s.i - start
	if n == 0 || n > 1 && s.b[start] == '0' || bits < 64 && v>>bits != 0 {
		return 0, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	return v, true
}

// uint64Value reads an integer into *dst, or leaves it for null.
func (s *scanner) uint64Value(dst *uint64) bool {
	if s.null() {
		return true
	}
	v, ok := s.uint(64)
	*dst = v
	return ok
}

// uintPtr reads an integer of at most bits bits into *store and points
// *dst at it, or sets *dst to nil for null.
func uintPtr[T uint32 | uint64](s *scanner, dst **T, store *T, bits uint) bool {
	if s.null() {
		*dst = nil
		return true
	}
	v, ok := s.uint(bits)
	*store, *dst = T(v), store
	return ok
}

// stringPtr reads a plain string for a *string field: it returns its bytes,
// or nil and sets *dst to nil for null (the caller points *dst at a copy).
func (s *scanner) stringPtr(dst **string) ([]byte, bool) {
	if s.null() {
		*dst = nil
		return nil, true
	}
	return s.plainString()
}

// stringValue reads a plain string into *dst, or leaves it for null.
func (s *scanner) stringValue(dst *string) bool {
	if s.null() {
		return true
	}
	v, ok := s.plainString()
	*dst = string(v)
	return ok
}

// boolValue reads true or false into *dst, or leaves it for null.
func (s *scanner) boolValue(dst *bool) bool {
	switch {
	case s.null():
	case s.literal("true"):
		*dst = true
	case s.literal("false"):
		*dst = false
	default:
		return false
	}
	return true
}

// maxSkipDepth bounds the nesting of an unknown field's value that skip
// walks; deeper values go to encoding/json.
const maxSkipDepth = 32

// skip reads any one JSON value strictly, as encoding/json's scanner would
// accept it.
func (s *scanner) skip(depth int) bool {
	s.space()
	if s.i >= len(s.b) || depth > maxSkipDepth {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipString()
	case c == '-' || c >= '0' && c <= '9':
		return s.skipNumber()
	case c == '{':
		s.i++
		if s.take('}') {
			return true
		}
		for {
			s.space()
			if !s.skipString() || !s.take(':') || !s.skip(depth+1) {
				return false
			}
			if s.take(',') {
				continue
			}
			return s.take('}')
		}
	case c == '[':
		s.i++
		if s.take(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if s.take(',') {
				continue
			}
			return s.take(']')
		}
	default:
		return s.literal("true") || s.literal("false") || s.literal("null")
	}
}

// skipString reads a string at i with any bytes encoding/json's scanner
// accepts: none below 0x20, and only valid escapes.
func (s *scanner) skipString() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if s.i >= len(s.b) {
				return false
			}
			e := s.b[s.i]
			s.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i < 4 {
					return false
				}
				for _, h := range s.b[s.i : s.i+4] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber reads a number at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) skipNumber() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
