package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

func TestHealthz(t *testing.T) {
	s, f, _ := newTestServer(t, "", nil)
	f.ready = errors.New("not connected") // liveness ignores readiness
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/healthz"})
	if rec.Code != http.StatusOK || rec.Body.String() != `{"status":"ok"}`+"\n" {
		t.Errorf("got %d %q, want 200 {\"status\":\"ok\"}", rec.Code, rec.Body)
	}
}

func TestReadyz(t *testing.T) {
	s, f, _ := newTestServer(t, "", nil)
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/readyz"})
	if rec.Code != http.StatusOK || rec.Body.String() != `{"status":"ready"}`+"\n" {
		t.Errorf("ready: got %d %q, want 200 {\"status\":\"ready\"}", rec.Code, rec.Body)
	}
	f.ready = errors.New("start-up grace not over (1.2s left)")
	rec = do(s.Handler(), req{method: http.MethodGet, path: "/readyz"})
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("not ready: got %d, want 503", rec.Code)
	}
	var got map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["status"] != "not ready" || got["reason"] != f.ready.Error() || len(got) != 2 {
		t.Errorf("not ready: got %v, want status \"not ready\" and reason %q", got, f.ready)
	}
}

func TestDebugQueues(t *testing.T) {
	s, f, logs := newTestServer(t, "", nil)
	type class struct {
		Name    string `json:"name"`
		Pending int    `json:"pending_requests"`
	}
	f.queues = map[string]any{"classes": []class{{"premium", 3}}}
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/debug/queues"})
	want := `{"classes":[{"name":"premium","pending_requests":3}]}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Errorf("got %d %q, want 200 %q", rec.Code, rec.Body, want)
	}

	f.queues = map[string]any{"bad": make(chan int)} // not encodable
	rec = do(s.Handler(), req{method: http.MethodGet, path: "/debug/queues"})
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("unencodable: got %d, want 500", rec.Code)
	}
	errorOf(t, rec)

	f.queues = nil
	f.panicMsg = "broken snapshot"
	rec = do(s.Handler(), req{method: http.MethodGet, path: "/debug/queues"})
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("panicking Control: got %d, want 500", rec.Code)
	}
	if msg := errorOf(t, rec); strings.Contains(msg, "broken") {
		t.Errorf("500 body leaks the panic: %q", msg)
	}
	if !strings.Contains(logs.String(), "broken snapshot") {
		t.Errorf("panic not logged: %s", logs)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "fairdispatch_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	s, _, _ := newTestServer(t, "secret", reg)
	rec := do(s.Handler(), req{method: http.MethodGet, path: "/metrics"})
	if rec.Code != http.StatusOK {
		t.Fatalf("status: got %d, want 200", rec.Code)
	}
	if body := rec.Body.String(); !strings.Contains(body, "fairdispatch_test_total 3") {
		t.Errorf("body: want fairdispatch_test_total 3, got %s", body)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	s, _, _ := newTestServer(t, "secret", nil)
	tests := []struct {
		method, path, allow string
	}{
		{http.MethodPut, "/busy_threshold", "GET, HEAD, POST"},
		{http.MethodDelete, "/busy_threshold", "GET, HEAD, POST"},
		{http.MethodPatch, "/busy_threshold", "GET, HEAD, POST"},
		{http.MethodPost, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
		{http.MethodDelete, "/debug/queues", "GET, HEAD"},
		{http.MethodOptions, "/healthz", "GET, HEAD"},
	}
	for _, tt := range tests {
		rec := do(s.Handler(), req{method: tt.method, path: tt.path})
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: got %d, want 405", tt.method, tt.path, rec.Code)
			continue
		}
		if got := rec.Header().Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: Allow got %q, want %q", tt.method, tt.path, got, tt.allow)
		}
		if msg := errorOf(t, rec); !strings.Contains(msg, tt.method) {
			t.Errorf("%s %s: error %q does not name the method", tt.method, tt.path, msg)
		}
	}
	// HEAD is served like GET.
	if rec := do(s.Handler(), req{method: http.MethodHead, path: "/healthz"}); rec.Code != http.StatusOK {
		t.Errorf("HEAD /healthz: got %d, want 200", rec.Code)
	}
}

func TestNotFound(t *testing.T) {
	s, _, _ := newTestServer(t, "", nil)
	for _, path := range []string{"/", "/busy_threshold/x", "/debug", "/nope"} {
		rec := do(s.Handler(), req{method: http.MethodGet, path: path})
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: got %d, want 404", path, rec.Code)
			continue
		}
		errorOf(t, rec)
	}
}

func TestLogs(t *testing.T) {
	const token = "very-secret-token"
	s, _, logs := newTestServer(t, token, nil)
	for _, auth := range []string{"", "Bearer wrong-" + token, "Bearer " + token} {
		r := post(`{"active_decode_blocks_threshold": 0.5}`)
		r.auth = auth
		do(s.Handler(), r)
	}
	out := logs.String()
	if strings.Contains(out, token) {
		t.Errorf("logs contain the token: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 { // two refusals, one change
		t.Fatalf("got %d log lines, want 3: %s", len(lines), out)
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["component"] != "admin" {
			t.Errorf("log line %q: component got %v, want admin", l, m["component"])
		}
	}
	if !strings.Contains(lines[2], `"new":{"active_decode_blocks_threshold":0.5,`) {
		t.Errorf("change log: got %s, want the new thresholds", lines[2])
	}
}

func TestStartAddrShutdown(t *testing.T) {
	s, _, _ := newTestServer(t, "", nil)
	if got := s.Addr(); got != "127.0.0.1:0" {
		t.Errorf("Addr before Start: got %q, want the configured 127.0.0.1:0", got)
	}
	if err := s.Shutdown(context.Background()); err != nil { // before Start: no-op
		t.Fatalf("Shutdown before Start: %v", err)
	}

	s, _, _ = newTestServer(t, "", nil)
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	addr := s.Addr()
	if _, port, _ := net.SplitHostPort(addr); port == "0" || port == "" {
		t.Fatalf("Addr after Start: got %q, want the bound port", addr)
	}
	if err := s.Start(); err == nil {
		t.Errorf("second Start: got nil, want an error")
	}

	// A second server on the same address fails in Start, synchronously.
	other := New(Config{Addr: addr}, &fakeControl{}, zerolog.Nop())
	if err := other.Start(); err == nil {
		_ = other.Shutdown(context.Background())
		t.Errorf("Start on a taken address: got nil, want a bind error")
	}

	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != `{"status":"ok"}`+"\n" {
		t.Errorf("GET /healthz: got %d %q", resp.StatusCode, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := client.Get("http://" + addr + "/healthz"); err == nil {
		t.Errorf("GET after Shutdown: got a response, want an error")
	}
	if err := s.Start(); err == nil {
		t.Errorf("Start after Shutdown: got nil, want an error")
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestDefaultAddr(t *testing.T) {
	s := New(Config{}, &fakeControl{}, zerolog.Nop())
	if got := s.Addr(); got != DefaultAddr {
		t.Errorf("Addr: got %q, want %q", got, DefaultAddr)
	}
	if s.srv.ReadHeaderTimeout == 0 || s.srv.ReadTimeout == 0 || s.srv.WriteTimeout == 0 || s.srv.IdleTimeout == 0 {
		t.Errorf("server timeouts not all set: %+v", s.srv)
	}
}

// TestPprofTakesTheToken: with a token set, /debug/pprof/ needs it like a
// write: the command line it serves holds --admin-token when that was a
// flag. Without a token it is open, as every route is.
func TestPprofTakesTheToken(t *testing.T) {
	f := &fakeControl{}
	s := New(Config{Addr: "127.0.0.1:0", Token: "s3cret", Pprof: true}, f, zerolog.Nop())
	for _, path := range []string{"/debug/pprof/cmdline", "/debug/pprof/", "/debug/pprof/symbol"} {
		if rec := do(s.Handler(), req{method: http.MethodGet, path: path}); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, rec.Code)
		}
		if rec := do(s.Handler(), req{method: http.MethodGet, path: path, auth: "Bearer s3cret"}); rec.Code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, rec.Code)
		}
	}
	open := New(Config{Addr: "127.0.0.1:0", Pprof: true}, f, zerolog.Nop())
	if rec := do(open.Handler(), req{method: http.MethodGet, path: "/debug/pprof/cmdline"}); rec.Code != http.StatusOK {
		t.Errorf("GET /debug/pprof/cmdline with no token configured: %d, want 200", rec.Code)
	}
}
