package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"fairdispatch/filters"
)

// MaxBodyBytes is the largest POST /busy_threshold body accepted, in bytes
// (64 KiB); a larger one is answered 413.
const MaxBodyBytes = 64 << 10

// MaxPrefillTokens is the largest active_prefill_tokens_threshold accepted, in
// tokens (2^40).
const MaxPrefillTokens = 1 << 40

// The JSON keys of the busy thresholds (docs/design.md, Worker selection; docs/config.md, Admin HTTP API).
const (
	// KeyDecodeBlocks is filters.Thresholds.DecodeBlocks, a fraction of total_kv_blocks.
	KeyDecodeBlocks = "active_decode_blocks_threshold"
	// KeyPrefillTokens is filters.Thresholds.PrefillTokens, in tokens.
	KeyPrefillTokens = "active_prefill_tokens_threshold"
	// KeyPrefillFrac is filters.Thresholds.PrefillFrac, a fraction of max_num_batched_tokens.
	KeyPrefillFrac = "active_prefill_tokens_threshold_frac"
)

// thresholdsJSON is the wire form of filters.Thresholds: null where unset.
type thresholdsJSON struct {
	DecodeBlocks  *float64 `json:"active_decode_blocks_threshold"`
	PrefillTokens *uint64  `json:"active_prefill_tokens_threshold"`
	PrefillFrac   *float64 `json:"active_prefill_tokens_threshold_frac"`
}

func toJSON(t filters.Thresholds) thresholdsJSON {
	return thresholdsJSON{DecodeBlocks: t.DecodeBlocks, PrefillTokens: t.PrefillTokens, PrefillFrac: t.PrefillFrac}
}

func (s *Server) getBusyThreshold(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, toJSON(s.ctl.Thresholds()))
}

// postBusyThreshold checks, in order: the token (401), the content type (415),
// the body size (413), the body (400); then applies the update (503 if the
// queue actor does not confirm it) and answers the three thresholds now in
// force.
func (s *Server) postBusyThreshold(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	if msg := checkContentType(r.Header.Get("Content-Type")); msg != "" {
		writeError(w, http.StatusUnsupportedMediaType, msg)
		return
	}
	tooLarge := fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes)
	if r.ContentLength > MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
			return
		}
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	u, err := parseUpdate(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}

	// Read, merge and apply under one lock, so that two concurrent partial
	// updates do not lose each other's keys.
	s.setMu.Lock()
	defer s.setMu.Unlock()
	old := s.ctl.Thresholds()
	next := u.apply(old)
	ctx, cancel := context.WithTimeout(r.Context(), ApplyTimeout)
	defer cancel()
	if err := s.ctl.SetThresholds(ctx, next); err != nil {
		s.log.Error().Err(err).Msg("busy thresholds not applied")
		writeError(w, http.StatusServiceUnavailable, "thresholds not confirmed as applied: "+err.Error())
		return
	}
	oldJSON, _ := json.Marshal(toJSON(old))
	nextJSON, _ := json.Marshal(toJSON(next))
	s.log.Info().RawJSON("old", oldJSON).RawJSON("new", nextJSON).Str("remote", r.RemoteAddr).
		Msg("busy thresholds changed")
	writeBody(w, http.StatusOK, nextJSON)
}

// checkContentType returns why ct is not acceptable, or "" if it is:
// application/json, with at most a charset parameter of utf-8.
func checkContentType(ct string) string {
	if ct == "" {
		return "missing Content-Type: want application/json"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Sprintf("invalid Content-Type %q: want application/json", clip(ct))
	}
	if mt != "application/json" {
		return fmt.Sprintf("unsupported Content-Type %q: want application/json", clip(mt))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Sprintf("unsupported Content-Type parameter %s=%q: want application/json or application/json; charset=utf-8", clip(k), clip(v))
		}
	}
	return ""
}

// update is a parsed POST /busy_threshold body.
type update struct {
	// set tells which thresholds the body names; vals holds their new values
	// (nil clears).
	setDecode, setTokens, setFrac bool
	vals                          filters.Thresholds
}

// apply returns cur with u's keys replaced. The result shares no pointer with
// cur that u changes.
func (u update) apply(cur filters.Thresholds) filters.Thresholds {
	if u.setDecode {
		cur.DecodeBlocks = u.vals.DecodeBlocks
	}
	if u.setTokens {
		cur.PrefillTokens = u.vals.PrefillTokens
	}
	if u.setFrac {
		cur.PrefillFrac = u.vals.PrefillFrac
	}
	return cur
}

// parseUpdate decodes a POST /busy_threshold body: one JSON object whose keys
// are among the three thresholds, each a valid value or null. It reports every
// problem of the object's keys and values at once.
func parseUpdate(body []byte) (update, error) {
	var u update
	if len(bytes.TrimSpace(body)) == 0 {
		return u, errors.New("empty body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return u, fmt.Errorf("invalid JSON: %s", jsonErr(err))
	}
	if off := dec.InputOffset(); len(bytes.TrimSpace(body[off:])) != 0 {
		return u, fmt.Errorf("invalid JSON: trailing data after the top-level value at offset %d", off)
	}
	if raw[0] != '{' {
		return u, fmt.Errorf("body must be a JSON object, got %s", kind(raw))
	}

	// raw is one valid object: walk its keys in order to catch duplicates.
	dec = json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return u, fmt.Errorf("invalid JSON: %s", jsonErr(err))
	}
	var problems []string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return u, fmt.Errorf("invalid JSON: %s", jsonErr(err))
		}
		key, _ := tok.(string) // object keys are strings
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return u, fmt.Errorf("invalid JSON: %s", jsonErr(err))
		}
		if seen[key] {
			problems = append(problems, fmt.Sprintf("duplicate key %q", clip(key)))
			continue
		}
		seen[key] = true
		switch key {
		case KeyDecodeBlocks:
			u.setDecode = true
			u.vals.DecodeBlocks, err = parseFraction(val)
		case KeyPrefillTokens:
			u.setTokens = true
			u.vals.PrefillTokens, err = parseTokens(val)
		case KeyPrefillFrac:
			u.setFrac = true
			u.vals.PrefillFrac, err = parseFraction(val)
		default:
			err = fmt.Errorf("unknown key (want %s, %s or %s)", KeyDecodeBlocks, KeyPrefillTokens, KeyPrefillFrac)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%q: %v", clip(key), err))
		}
	}
	if len(problems) > 0 {
		return update{}, errors.New(strings.Join(problems, "; "))
	}
	return u, nil
}

// parseFraction parses the value of a fractional threshold: null, or a finite
// number >= 0 (-0 becomes 0).
func parseFraction(v json.RawMessage) (*float64, error) {
	if string(v) == "null" {
		return nil, nil
	}
	if !isNumber(v) {
		return nil, fmt.Errorf("must be a number >= 0 or null, got %s", kind(v))
	}
	f, err := strconv.ParseFloat(string(v), 64)
	switch {
	case math.IsInf(f, 0) || math.IsNaN(f):
		return nil, fmt.Errorf("must be finite, got %s", clip(string(v)))
	case err != nil: // not reached for a valid JSON number that is finite
		return nil, fmt.Errorf("must be a number >= 0, got %s", clip(string(v)))
	case f < 0:
		return nil, fmt.Errorf("must be >= 0, got %s", clip(string(v)))
	}
	f = math.Abs(f) // -0 -> 0
	return &f, nil
}

// parseTokens parses the value of active_prefill_tokens_threshold: null, or an
// integer literal in [0, MaxPrefillTokens]. A fraction or exponent (1.5, 1.0,
// 1e3) is refused: the value is a token count.
func parseTokens(v json.RawMessage) (*uint64, error) {
	if string(v) == "null" {
		return nil, nil
	}
	if !isNumber(v) {
		return nil, fmt.Errorf("must be an integer in [0, %d] or null, got %s", uint64(MaxPrefillTokens), kind(v))
	}
	s := string(v)
	if strings.ContainsAny(s, ".eE") {
		return nil, fmt.Errorf("must be an integer (no fraction or exponent), got %s", clip(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil && strings.HasPrefix(s, "-"), err == nil && n < 0:
		return nil, fmt.Errorf("must be >= 0, got %s", clip(s))
	case err != nil, n > MaxPrefillTokens:
		return nil, fmt.Errorf("must be at most %d (2^40), got %s", uint64(MaxPrefillTokens), clip(s))
	}
	u := uint64(n)
	return &u, nil
}

// isNumber reports whether v, one valid JSON value, is a number.
func isNumber(v json.RawMessage) bool {
	return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'))
}

// kind names the type of v, one valid JSON value, for error messages.
func kind(v json.RawMessage) string {
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '{':
		return "an object"
	case v[0] == '[':
		return "an array"
	case v[0] == '"':
		return "a string"
	case v[0] == 't' || v[0] == 'f':
		return "a boolean"
	case v[0] == 'n':
		return "null"
	}
	return "a number"
}

// jsonErr renders a decoding error with its offset when it has one.
func jsonErr(err error) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("%v at offset %d", se, se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// clip shortens s for an error message (keys and values come from the client).
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
