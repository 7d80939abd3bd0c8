package admin

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestUIServesTheSelfContainedPage: GET /ui answers the embedded page as HTML,
// without a token even when one guards the write routes, with a CSP that
// admits only the page's own inline script; nothing in the page loads from
// elsewhere; POST is refused.
func TestUIServesTheSelfContainedPage(t *testing.T) {
	s, _, _ := newTestServer(t, "secret", nil)
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/ui"})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ui: got %d %s, want 200", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type %q, want text/html", ct)
	}
	body := rec.Body.String()
	for _, want := range []string{`fetch("debug/queues"`, `id="classes"`, `id="workers"`, `id="policy-revision"`, `id="backlog-chart"`, `id="share-chart"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// No external asset: no src= or href= at all, no URL but the API's.
	if m := regexp.MustCompile(`(?i)\b(src|href)\s*=|https?://[^"\s]*`).FindAllString(body, -1); len(m) > 0 {
		for _, u := range m {
			if u != "http://www.w3.org/2000/svg" { // the SVG namespace, not a fetch
				t.Errorf("the page refers to %q: it must load nothing from elsewhere", u)
			}
		}
	}
	csp := rec.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") ||
		!strings.Contains(csp, "script-src '"+scriptHash(uiPage)+"'") {
		t.Errorf("CSP %q", csp)
	}
	if rec := do(s.Handler(), req{method: http.MethodHead, path: "/ui"}); rec.Code != http.StatusOK {
		t.Errorf("HEAD /ui: got %d", rec.Code)
	}
	if rec := do(s.Handler(), req{method: http.MethodPost, path: "/ui", auth: "Bearer secret"}); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui: got %d, want 405", rec.Code)
	}
}

// TestScriptHashCoversTheWholeScript: the hash changes with any byte of the
// script, so a CSP computed from an older page would block the new one.
func TestScriptHashCoversTheWholeScript(t *testing.T) {
	a := scriptHash([]byte("<p><script>let x = 1;</script>"))
	b := scriptHash([]byte("<p><script>let x = 2;</script>"))
	if a == b || !strings.HasPrefix(a, "sha256-") || len(a) != len("sha256-")+44 {
		t.Fatalf("got %q and %q", a, b)
	}
}
