package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// secAdminDo sends one request to the dispatcher's admin API and returns the
// status and body.
func secAdminDo(t *testing.T, p *proc, method, path, contentType, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// secAdminThresholds reads GET /busy_threshold.
func secAdminThresholds(t *testing.T, p *proc) map[string]any {
	t.Helper()
	code, body := secAdminDo(t, p, http.MethodGet, "/busy_threshold", "", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /busy_threshold: got %d %s, want 200", code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestAdminTokenGuardsWrites runs the real binary with --admin-token: a write
// without the token, or with another, gets 401 and changes nothing; the
// content type and body size checks come after the token; with the token the
// write applies. Reads stay open.
func TestAdminTokenGuardsWrites(t *testing.T) {
	n := startNATS(t)
	const token = "e2e-admin-token-0123456789"
	p := startDispatcher(t, n.URL(), "--admin-token", token, "--active-prefill-tokens-threshold", "1000")
	const ctJSON = "application/json"
	update := `{"active_prefill_tokens_threshold": 5}`
	before := secAdminThresholds(t, p)
	if got := before["active_prefill_tokens_threshold"]; got != float64(1000) {
		t.Fatalf("got initial threshold %v, want 1000", got)
	}

	refused := []struct {
		name, contentType, auth, body string
		want                          int
		msg                           string
	}{
		{"no token", ctJSON, "", update, http.StatusUnauthorized, "missing bearer token"},
		{"wrong token", ctJSON, "Bearer not-the-token", update, http.StatusUnauthorized, "invalid bearer token"},
		{"token prefix", ctJSON, "Bearer " + token[:len(token)-1], update, http.StatusUnauthorized, "invalid bearer token"},
		{"token as basic", ctJSON, "Basic " + token, update, http.StatusUnauthorized, "missing bearer token"},
		{"token without scheme", ctJSON, token, update, http.StatusUnauthorized, "missing bearer token"},
		// The token is checked first: an anonymous caller learns nothing from 415 or 413.
		{"no token, wrong type", "text/plain", "", update, http.StatusUnauthorized, "missing bearer token"},
		{"no token, too large", ctJSON, "", strings.Repeat(" ", 64<<10+1), http.StatusUnauthorized, "missing bearer token"},
		{"token, wrong type", "text/plain", "Bearer " + token, update, http.StatusUnsupportedMediaType, "Content-Type"},
		{"token, too large", ctJSON, "Bearer " + token, `{"active_prefill_tokens_threshold": 5}` + strings.Repeat(" ", 64<<10), http.StatusRequestEntityTooLarge, "65536"},
		{"token, bad value", ctJSON, "Bearer " + token, `{"active_prefill_tokens_threshold": -1}`, http.StatusBadRequest, "active_prefill_tokens_threshold"},
		{"token, unknown key", ctJSON, "Bearer " + token, `{"prefill": 5}`, http.StatusBadRequest, "prefill"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			code, body := secAdminDo(t, p, http.MethodPost, "/busy_threshold", tc.contentType, tc.auth, tc.body)
			if code != tc.want || !strings.Contains(body, tc.msg) {
				t.Fatalf("got %d %s, want %d with %q", code, body, tc.want, tc.msg)
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := secJSONUnmarshal(body, &e); err != nil || e.Error == "" {
				t.Fatalf("got body %s, want {\"error\": ...}", body)
			}
			if after := secAdminThresholds(t, p); after["active_prefill_tokens_threshold"] != float64(1000) {
				t.Fatalf("thresholds changed to %v by a refused write", after)
			}
		})
	}

	t.Run("reads need no token", func(t *testing.T) {
		for _, path := range []string{"/busy_threshold", "/metrics", "/healthz", "/readyz", "/debug/queues"} {
			code, body := secAdminDo(t, p, http.MethodGet, path, "", "", "")
			// No worker runs here: /readyz answers 503 "no live workers" (docs/design.md, Fleet outage).
			if code != http.StatusOK && !(path == "/readyz" && code == http.StatusServiceUnavailable && strings.Contains(body, "no live workers")) {
				t.Fatalf("GET %s: got %d %s, want 200", path, code, body)
			}
		}
	})

	t.Run("with the token the write applies", func(t *testing.T) {
		code, body := secAdminDo(t, p, http.MethodPost, "/busy_threshold", "application/json; charset=utf-8", "bearer "+token, update)
		if code != http.StatusOK {
			t.Fatalf("got %d %s, want 200", code, body)
		}
		if after := secAdminThresholds(t, p); after["active_prefill_tokens_threshold"] != float64(5) {
			t.Fatalf("got thresholds %v after the write, want active_prefill_tokens_threshold 5", after)
		}
	})

	if out := p.out.String(); strings.Contains(out, token) {
		t.Fatalf("the admin token appears in the dispatcher's output")
	} else if !strings.Contains(out, "admin write refused") {
		t.Fatalf("refused writes are not logged:\n%s", tail(out, 20))
	}
}

func secJSONUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
