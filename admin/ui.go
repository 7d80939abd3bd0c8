package admin

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// uiPage is the status page served at /ui (docs/operations.md, The status
// page): one HTML file with its CSS and JavaScript inline, no external asset,
// which polls GET /debug/queues every second.
//
//go:embed ui.html
var uiPage []byte

// uiCSP is the Content-Security-Policy of /ui: nothing loads from elsewhere,
// the only script is the page's own (by hash), and it may fetch only from
// this server.
var uiCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; " +
	"script-src '" + scriptHash(uiPage) + "'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// scriptHash returns the CSP source of the inline script in page: sha256-
// and the base64 of the hash of the text between <script> and </script>.
func scriptHash(page []byte) string {
	_, rest, ok := bytes.Cut(page, []byte("<script>"))
	body, _, ok2 := bytes.Cut(rest, []byte("</script>"))
	if !ok || !ok2 {
		panic("admin: ui.html has no inline <script>")
	}
	sum := sha256.Sum256(body)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

func (s *Server) ui(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", uiCSP)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(uiPage) // a failed write is the client's loss
}
