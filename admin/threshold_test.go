package admin

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"fairdispatch/filters"
)

func TestGetBusyThreshold(t *testing.T) {
	s, f, _ := newTestServer(t, "secret", nil)
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/busy_threshold"})
	if rec.Code != http.StatusOK {
		t.Fatalf("status: got %d, want 200", rec.Code)
	}
	want := `{"active_decode_blocks_threshold":null,"active_prefill_tokens_threshold":null,"active_prefill_tokens_threshold_frac":null}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body: got %s, want %s", got, want)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type: got %q, want application/json", got)
	}

	f.t = filters.Thresholds{DecodeBlocks: ptr(0.85), PrefillTokens: ptr(uint64(8192)), PrefillFrac: ptr(1.5)}
	rec = do(s.Handler(), req{method: http.MethodGet, path: "/busy_threshold"})
	want = `{"active_decode_blocks_threshold":0.85,"active_prefill_tokens_threshold":8192,"active_prefill_tokens_threshold_frac":1.5}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body: got %s, want %s", got, want)
	}
}

func TestPostBusyThreshold(t *testing.T) {
	initial := filters.Thresholds{DecodeBlocks: ptr(0.9), PrefillTokens: ptr(uint64(4096)), PrefillFrac: ptr(0.5)}
	tests := []struct {
		name string
		body string
		want thresholdsJSON
	}{
		{"empty object changes nothing", `{}`,
			thresholdsJSON{ptr(0.9), ptr(uint64(4096)), ptr(0.5)}},
		{"partial keeps the others", `{"active_prefill_tokens_threshold": 100}`,
			thresholdsJSON{ptr(0.9), ptr(uint64(100)), ptr(0.5)}},
		{"null clears", `{"active_decode_blocks_threshold": null}`,
			thresholdsJSON{nil, ptr(uint64(4096)), ptr(0.5)}},
		{"all three", `{"active_decode_blocks_threshold": 0.75, "active_prefill_tokens_threshold": 0, "active_prefill_tokens_threshold_frac": 2}`,
			thresholdsJSON{ptr(0.75), ptr(uint64(0)), ptr(2.0)}},
		{"all cleared", `{"active_decode_blocks_threshold": null, "active_prefill_tokens_threshold": null, "active_prefill_tokens_threshold_frac": null}`,
			thresholdsJSON{}},
		{"tokens at 2^40", `{"active_prefill_tokens_threshold": 1099511627776}`,
			thresholdsJSON{ptr(0.9), ptr(uint64(1 << 40)), ptr(0.5)}},
		{"negative zero is zero", `{"active_decode_blocks_threshold": -0, "active_prefill_tokens_threshold": -0}`,
			thresholdsJSON{ptr(0.0), ptr(uint64(0)), ptr(0.5)}},
		{"tiny fraction underflows to zero", `{"active_prefill_tokens_threshold_frac": 1e-400}`,
			thresholdsJSON{ptr(0.9), ptr(uint64(4096)), ptr(0.0)}},
		{"whitespace around", " \n\t{\"active_prefill_tokens_threshold_frac\": 0.25}\r\n ",
			thresholdsJSON{ptr(0.9), ptr(uint64(4096)), ptr(0.25)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f, _ := newTestServer(t, "", nil)
			f.t = copyThresholds(initial)
			rec := do(s.Handler(), post(tt.body))
			if rec.Code != http.StatusOK {
				t.Fatalf("status: got %d (%s), want 200", rec.Code, rec.Body)
			}
			if got := thresholdsOf(t, rec.Body.Bytes()); !equalThresholds(got, tt.want) {
				t.Errorf("response: got %+v, want %+v", show(got), show(tt.want))
			}
			// GET after POST shows the values.
			get := do(s.Handler(), req{method: http.MethodGet, path: "/busy_threshold"})
			if got := thresholdsOf(t, get.Body.Bytes()); !equalThresholds(got, tt.want) {
				t.Errorf("GET after POST: got %+v, want %+v", show(got), show(tt.want))
			}
			if math.Signbit(deref(f.t.DecodeBlocks)) {
				t.Errorf("stored decode threshold is -0")
			}
		})
	}
}

func TestPostBusyThresholdAuth(t *testing.T) {
	const token = "s3cr3t-t0ken"
	body := `{"active_prefill_tokens_threshold": 512}`
	tests := []struct {
		name      string
		auth      string
		want      int
		challenge string // WWW-Authenticate
	}{
		{"no header", "", http.StatusUnauthorized, `Bearer realm="fairdispatch"`},
		{"other token", "Bearer nope", http.StatusUnauthorized, `Bearer realm="fairdispatch", error="invalid_token"`},
		{"token prefix", "Bearer s3cr3t", http.StatusUnauthorized, `Bearer realm="fairdispatch", error="invalid_token"`},
		{"token plus suffix", "Bearer " + token + "x", http.StatusUnauthorized, `Bearer realm="fairdispatch", error="invalid_token"`},
		{"basic scheme", "Basic " + token, http.StatusUnauthorized, `Bearer realm="fairdispatch"`},
		{"bearer without token", "Bearer ", http.StatusUnauthorized, `Bearer realm="fairdispatch"`},
		{"bare token", token, http.StatusUnauthorized, `Bearer realm="fairdispatch"`},
		{"right token", "Bearer " + token, http.StatusOK, ""},
		{"scheme case-insensitive", "bearer " + token, http.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f, logs := newTestServer(t, token, nil)
			r := post(body)
			r.auth = tt.auth
			rec := do(s.Handler(), r)
			if rec.Code != tt.want {
				t.Fatalf("status: got %d (%s), want %d", rec.Code, rec.Body, tt.want)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate: got %q, want %q", got, tt.challenge)
			}
			tok := f.Thresholds().PrefillTokens
			if tt.want == http.StatusOK {
				if tok == nil || *tok != 512 {
					t.Errorf("threshold: got %v, want 512", show(toJSON(f.Thresholds())))
				}
			} else {
				errorOf(t, rec)
				if tok != nil || f.setCount() != 0 {
					t.Errorf("threshold: got %v after %d sets, want unchanged (null, 0 sets)", show(toJSON(f.Thresholds())), f.setCount())
				}
			}
			if strings.Contains(logs.String(), token) {
				t.Errorf("logs contain the token: %s", logs)
			}
		})
	}

	// GET routes are open even with a token.
	s, _, _ := newTestServer(t, token, nil)
	for _, path := range []string{"/busy_threshold", "/healthz", "/debug/queues", "/metrics"} {
		if rec := do(s.Handler(), req{method: http.MethodGet, path: path}); rec.Code != http.StatusOK {
			t.Errorf("GET %s with a token configured: got %d, want 200", path, rec.Code)
		}
	}
}

func TestPostBusyThresholdErrors(t *testing.T) {
	tests := []struct {
		name     string
		r        req
		want     int
		contains []string // in the error message
	}{
		// 415
		{"no content type", req{method: http.MethodPost, path: "/busy_threshold", body: `{}`}, 415, []string{"missing Content-Type"}},
		{"text/plain", req{method: http.MethodPost, path: "/busy_threshold", body: `{}`, contentType: "text/plain"}, 415, []string{"text/plain"}},
		{"form", req{method: http.MethodPost, path: "/busy_threshold", body: `{}`, contentType: "application/x-www-form-urlencoded"}, 415, []string{"application/x-www-form-urlencoded"}},
		{"other charset", req{method: http.MethodPost, path: "/busy_threshold", body: `{}`, contentType: "application/json; charset=latin1"}, 415, []string{"charset"}},
		{"malformed content type", req{method: http.MethodPost, path: "/busy_threshold", body: `{}`, contentType: "application/json; ="}, 415, []string{"invalid Content-Type"}},
		// 400: JSON
		{"empty body", post(""), 400, []string{"empty body"}},
		{"blank body", post("  \n"), 400, []string{"empty body"}},
		{"bad json", post(`{"active_prefill_tokens_threshold": }`), 400, []string{"invalid JSON", "offset"}},
		{"truncated", post(`{"active_prefill_tokens_threshold": 1`), 400, []string{"invalid JSON"}},
		{"trailing comma", post(`{"active_prefill_tokens_threshold": 1,}`), 400, []string{"invalid JSON"}},
		{"trailing object", post(`{} {}`), 400, []string{"trailing data"}},
		{"trailing garbage", post(`{"active_prefill_tokens_threshold": 1} x`), 400, []string{"trailing data"}},
		{"array", post(`[]`), 400, []string{"JSON object", "array"}},
		{"null body", post(`null`), 400, []string{"JSON object", "null"}},
		{"string body", post(`"x"`), 400, []string{"JSON object", "string"}},
		{"number body", post(`42`), 400, []string{"JSON object", "number"}},
		// 400: keys
		{"unknown key", post(`{"active_prefill_tokens": 5}`), 400, []string{`"active_prefill_tokens"`, "unknown key"}},
		{"duplicate key", post(`{"active_prefill_tokens_threshold": 5, "active_prefill_tokens_threshold": null}`), 400, []string{"duplicate key"}},
		{"key case matters", post(`{"Active_Prefill_Tokens_Threshold": 5}`), 400, []string{"unknown key"}},
		// 400: values
		{"negative decode", post(`{"active_decode_blocks_threshold": -0.1}`), 400, []string{KeyDecodeBlocks, ">= 0"}},
		{"negative frac", post(`{"active_prefill_tokens_threshold_frac": -1}`), 400, []string{KeyPrefillFrac, ">= 0"}},
		{"infinite decode", post(`{"active_decode_blocks_threshold": 1e400}`), 400, []string{KeyDecodeBlocks, "finite"}},
		{"infinite frac", post(`{"active_prefill_tokens_threshold_frac": -1e999}`), 400, []string{KeyPrefillFrac, "finite"}},
		{"string decode", post(`{"active_decode_blocks_threshold": "0.5"}`), 400, []string{KeyDecodeBlocks, "string"}},
		{"bool frac", post(`{"active_prefill_tokens_threshold_frac": true}`), 400, []string{KeyPrefillFrac, "boolean"}},
		{"negative tokens", post(`{"active_prefill_tokens_threshold": -1}`), 400, []string{KeyPrefillTokens, ">= 0"}},
		{"huge negative tokens", post(`{"active_prefill_tokens_threshold": -99999999999999999999999}`), 400, []string{KeyPrefillTokens, ">= 0"}},
		{"float tokens", post(`{"active_prefill_tokens_threshold": 1.5}`), 400, []string{KeyPrefillTokens, "integer"}},
		{"integral float tokens", post(`{"active_prefill_tokens_threshold": 1.0}`), 400, []string{KeyPrefillTokens, "integer"}},
		{"exponent tokens", post(`{"active_prefill_tokens_threshold": 1e3}`), 400, []string{KeyPrefillTokens, "integer"}},
		{"tokens over 2^40", post(`{"active_prefill_tokens_threshold": 1099511627777}`), 400, []string{KeyPrefillTokens, "2^40"}},
		{"tokens over uint64", post(`{"active_prefill_tokens_threshold": 99999999999999999999999}`), 400, []string{KeyPrefillTokens, "2^40"}},
		{"string tokens", post(`{"active_prefill_tokens_threshold": "100"}`), 400, []string{KeyPrefillTokens, "string"}},
		{"object tokens", post(`{"active_prefill_tokens_threshold": {}}`), 400, []string{KeyPrefillTokens, "object"}},
		{"every problem at once", post(`{"x": 1, "active_decode_blocks_threshold": -1, "active_prefill_tokens_threshold": 0.5}`), 400,
			[]string{`"x"`, KeyDecodeBlocks, KeyPrefillTokens}},
		// 405
		{"put", req{method: http.MethodPut, path: "/busy_threshold", body: `{}`, contentType: "application/json"}, 405, []string{"PUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f, _ := newTestServer(t, "", nil)
			f.t = filters.Thresholds{PrefillTokens: ptr(uint64(7))}
			rec := do(s.Handler(), tt.r)
			if rec.Code != tt.want {
				t.Fatalf("status: got %d (%s), want %d", rec.Code, rec.Body, tt.want)
			}
			msg := errorOf(t, rec)
			for _, c := range tt.contains {
				if !strings.Contains(msg, c) {
					t.Errorf("error %q: want it to mention %q", msg, c)
				}
			}
			if f.setCount() != 0 || deref(f.t.PrefillTokens) != 7 || f.t.DecodeBlocks != nil || f.t.PrefillFrac != nil {
				t.Errorf("thresholds changed by a failed request: %+v", show(toJSON(f.t)))
			}
		})
	}
}

func TestPostBusyThresholdContentTypes(t *testing.T) {
	for _, ct := range []string{"application/json", "application/json; charset=utf-8",
		"Application/JSON; Charset=UTF-8", "application/json;charset=\"utf-8\""} {
		s, _, _ := newTestServer(t, "", nil)
		r := post(`{}`)
		r.contentType = ct
		if rec := do(s.Handler(), r); rec.Code != http.StatusOK {
			t.Errorf("Content-Type %q: got %d (%s), want 200", ct, rec.Code, rec.Body)
		}
	}
}

func TestPostBusyThresholdBodySize(t *testing.T) {
	// A valid object padded with spaces to exactly n bytes.
	padded := func(n int) string {
		obj := `{"active_prefill_tokens_threshold": 9}`
		return obj + strings.Repeat(" ", n-len(obj))
	}
	tests := []struct {
		name    string
		size    int
		chunked bool // no Content-Length: the limit is found while reading
		want    int
	}{
		{"64 KiB", MaxBodyBytes, false, http.StatusOK},
		{"64 KiB + 1", MaxBodyBytes + 1, false, http.StatusRequestEntityTooLarge},
		{"64 KiB chunked", MaxBodyBytes, true, http.StatusOK},
		{"64 KiB + 1 chunked", MaxBodyBytes + 1, true, http.StatusRequestEntityTooLarge},
		{"1 MiB chunked", 1 << 20, true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, f, _ := newTestServer(t, "", nil)
			hr := newPost(padded(tt.size))
			if tt.chunked {
				hr.ContentLength = -1
			}
			rec := serve(s.Handler(), hr)
			if rec.Code != tt.want {
				t.Fatalf("status: got %d (%s), want %d", rec.Code, rec.Body, tt.want)
			}
			if tt.want == http.StatusOK {
				return
			}
			if msg := errorOf(t, rec); !strings.Contains(msg, "65536") {
				t.Errorf("error %q: want it to name the limit", msg)
			}
			if f.setCount() != 0 {
				t.Errorf("thresholds applied from an oversized body")
			}
		})
	}
}

func TestPostBusyThresholdNotApplied(t *testing.T) {
	s, f, _ := newTestServer(t, "", nil)
	f.setErr = errStopping
	rec := do(s.Handler(), post(`{"active_prefill_tokens_threshold": 1}`))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status: got %d, want 503", rec.Code)
	}
	if msg := errorOf(t, rec); !strings.Contains(msg, errStopping.Error()) {
		t.Errorf("error %q: want it to carry %q", msg, errStopping)
	}
}

func TestParseUpdateDoesNotAliasCurrent(t *testing.T) {
	cur := filters.Thresholds{DecodeBlocks: ptr(0.5)}
	u, err := parseUpdate([]byte(`{"active_decode_blocks_threshold": 0.7}`))
	if err != nil {
		t.Fatal(err)
	}
	next := u.apply(cur)
	if *cur.DecodeBlocks != 0.5 || *next.DecodeBlocks != 0.7 {
		t.Errorf("got cur %v next %v, want 0.5 and 0.7", *cur.DecodeBlocks, *next.DecodeBlocks)
	}
}

// FuzzBusyThresholdBody posts arbitrary bodies: the handler must not panic,
// must answer 200 or 400 with a JSON body, must apply only on 200, and a 200
// must leave valid thresholds that the response shows.
func FuzzBusyThresholdBody(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"active_decode_blocks_threshold": 0.85}`,
		`{"active_prefill_tokens_threshold": 1099511627776}`,
		`{"active_prefill_tokens_threshold_frac": null, "active_decode_blocks_threshold": 1e-3}`,
		`{"active_prefill_tokens_threshold": 1.5}`,
		`{"active_prefill_tokens_threshold": -0}`,
		`{"active_decode_blocks_threshold": 1e400}`,
		`{"a": 1, "a": 2}`,
		`[1, 2]`,
		`{} trailing`,
		`{"active_prefill_tokens_threshold": 1`,
		"\x00\xff",
		``,
	} {
		f.Add([]byte(seed))
	}
	s, fc, _ := newTestServer(f, "", nil)
	h := s.Handler()
	start := filters.Thresholds{DecodeBlocks: ptr(0.5), PrefillTokens: ptr(uint64(100)), PrefillFrac: ptr(0.25)}
	f.Fuzz(func(t *testing.T, body []byte) {
		fc.mu.Lock()
		fc.t, fc.sets = copyThresholds(start), 0
		fc.mu.Unlock()

		rec := serve(h, newPost(string(body)))
		got := fc.Thresholds()
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("response for %q is not JSON: %q", body, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK:
			if err := validThresholds(got); err != "" {
				t.Fatalf("200 for %q left invalid thresholds: %s", body, err)
			}
			if resp := thresholdsOf(t, rec.Body.Bytes()); !equalThresholds(resp, toJSON(got)) {
				t.Fatalf("200 for %q: response %+v, applied %+v", body, show(resp), show(toJSON(got)))
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			errorOf(t, rec)
			if fc.setCount() != 0 || !equalThresholds(toJSON(got), toJSON(start)) {
				t.Fatalf("%d for %q changed thresholds to %+v", rec.Code, body, show(toJSON(got)))
			}
		default:
			t.Fatalf("status %d for %q: want 200, 400 or 413", rec.Code, body)
		}
	})
}

// validThresholds returns what is wrong with t, or "".
func validThresholds(t filters.Thresholds) string {
	for _, f := range []*float64{t.DecodeBlocks, t.PrefillFrac} {
		if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || *f < 0 || math.Signbit(*f)) {
			return "fraction not finite and >= 0"
		}
	}
	if t.PrefillTokens != nil && *t.PrefillTokens > MaxPrefillTokens {
		return "tokens over 2^40"
	}
	return ""
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// show renders thresholds for a failure message.
func show(v thresholdsJSON) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestPostBusyThresholdConcurrentPartialUpdates(t *testing.T) {
	s, f, _ := newTestServer(t, "", nil)
	bodies := []string{
		`{"active_decode_blocks_threshold": 0.5}`,
		`{"active_prefill_tokens_threshold": 64}`,
		`{"active_prefill_tokens_threshold_frac": 0.75}`,
	}
	done := make(chan int, len(bodies))
	for _, b := range bodies {
		go func() { done <- do(s.Handler(), post(b)).Code }()
	}
	for range bodies {
		if code := <-done; code != http.StatusOK {
			t.Errorf("status: got %d, want 200", code)
		}
	}
	want := thresholdsJSON{ptr(0.5), ptr(uint64(64)), ptr(0.75)}
	if got := toJSON(f.Thresholds()); !equalThresholds(got, want) {
		t.Errorf("got %s, want %s (no update lost)", show(got), show(want))
	}
}
