package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/filters"
	"fairdispatch/internal/natstest"
)

// fakeControl is a Control whose state tests set and inspect. The test sets
// setErr, ready, queues and panicMsg between requests; mu guards what the
// handler changes.
type fakeControl struct {
	mu       sync.Mutex
	t        filters.Thresholds
	sets     int   // SetThresholds calls that applied
	setErr   error // returned by SetThresholds (nothing applied)
	ready    error
	queues   any
	panicMsg string // Queues panics with it when not empty
}

func copyThresholds(t filters.Thresholds) filters.Thresholds {
	var out filters.Thresholds
	if t.DecodeBlocks != nil {
		out.DecodeBlocks = ptr(*t.DecodeBlocks)
	}
	if t.PrefillTokens != nil {
		out.PrefillTokens = ptr(*t.PrefillTokens)
	}
	if t.PrefillFrac != nil {
		out.PrefillFrac = ptr(*t.PrefillFrac)
	}
	return out
}

func (f *fakeControl) Thresholds() filters.Thresholds {
	f.mu.Lock()
	defer f.mu.Unlock()
	return copyThresholds(f.t)
}

func (f *fakeControl) SetThresholds(ctx context.Context, t filters.Thresholds) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return f.setErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.t = copyThresholds(t)
	f.sets++
	return nil
}

func (f *fakeControl) Ready() error { return f.ready }

func (f *fakeControl) Queues() any {
	if f.panicMsg != "" {
		panic(f.panicMsg)
	}
	return f.queues
}

func (f *fakeControl) setCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}

func ptr[T any](v T) *T { return &v }

// newTestServer builds a Server on a fresh fake; logs go to the returned buffer.
func newTestServer(t testing.TB, token string, g prometheus.Gatherer) (*Server, *fakeControl, *natstest.Buffer) {
	t.Helper()
	f := &fakeControl{}
	buf := &natstest.Buffer{}
	s := New(Config{Addr: "127.0.0.1:0", Token: token, Gatherer: g}, f, zerolog.New(buf))
	return s, f, buf
}

// req is one request to the handler.
type req struct {
	method, path string
	body         string
	contentType  string // "" sends none
	auth         string // Authorization header; "" sends none
}

// do serves r on h and returns the recorded response.
func do(h http.Handler, r req) *httptest.ResponseRecorder {
	hr := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	if r.auth != "" {
		hr.Header.Set("Authorization", r.auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, hr)
	return rec
}

// post is a JSON POST /busy_threshold without a token.
func post(body string) req {
	return req{method: http.MethodPost, path: "/busy_threshold", body: body, contentType: "application/json"}
}

// errorOf decodes an {"error": ...} body; it fails the test if the body is not
// exactly that.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	var e errorBody
	if err := dec.Decode(&e); err != nil || e.Error == "" {
		t.Fatalf("body %q: want {\"error\": \"...\"} (%v)", rec.Body.String(), err)
	}
	return e.Error
}

// thresholdsOf decodes a thresholds body, requiring exactly the three keys.
func thresholdsOf(t *testing.T, body []byte) thresholdsJSON {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if len(m) != 3 {
		t.Fatalf("body %q: got %d keys, want 3", body, len(m))
	}
	for _, k := range []string{KeyDecodeBlocks, KeyPrefillTokens, KeyPrefillFrac} {
		if _, ok := m[k]; !ok {
			t.Fatalf("body %q: key %s missing", body, k)
		}
	}
	var v thresholdsJSON
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return v
}

func equalThresholds(a, b thresholdsJSON) bool {
	return eqPtr(a.DecodeBlocks, b.DecodeBlocks) && eqPtr(a.PrefillTokens, b.PrefillTokens) &&
		eqPtr(a.PrefillFrac, b.PrefillFrac)
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

var errStopping = errors.New("dispatcher stopping")

// newPost builds a JSON POST /busy_threshold request without a token.
func newPost(body string) *http.Request {
	hr := httptest.NewRequest(http.MethodPost, "/busy_threshold", strings.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	return hr
}

// serve serves hr on h.
func serve(h http.Handler, hr *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, hr)
	return rec
}
