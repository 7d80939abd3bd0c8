package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"fairdispatch/filters"
)

// DefaultAddr is the address the server listens on when Config.Addr is empty:
// loopback only (docs/config.md, Admin HTTP API).
const DefaultAddr = "127.0.0.1:8080"

// The http.Server's limits.
const (
	// ReadHeaderTimeout bounds reading a request's line and headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds a whole exchange, from the end of the headers to the
	// end of the response, including a POST waiting ApplyTimeout for the actor.
	WriteTimeout = 30 * time.Second
	// IdleTimeout bounds how long a keep-alive connection waits for a request.
	IdleTimeout = 120 * time.Second
	// MaxHeaderBytes bounds the request line and headers, in bytes.
	MaxHeaderBytes = 16 << 10
	// ApplyTimeout bounds how long POST /busy_threshold waits for the queue
	// actor to apply new thresholds before answering 503.
	ApplyTimeout = 5 * time.Second
)

// Control is what admin needs from the dispatcher. Its methods are called from
// HTTP handler goroutines, concurrently.
type Control interface {
	// Thresholds returns the current busy thresholds, from an immutable
	// snapshot; it is cheap. The caller does not modify what the pointers
	// point to.
	Thresholds() filters.Thresholds
	// SetThresholds hands t to the queue actor and returns once it is applied,
	// or with an error (ctx done, dispatcher shutting down). t's pointers are
	// fresh and not retained by admin.
	SetThresholds(ctx context.Context, t filters.Thresholds) error
	// Ready returns nil when the dispatcher is ready (connected to NATS,
	// streams present, start-up grace over), else an error saying why not.
	Ready() error
	// Queues returns an immutable debug snapshot of the queues and workers,
	// JSON-encoded as is for GET /debug/queues.
	Queues() any
}

// Config configures a Server.
type Config struct {
	// Addr is the TCP address to listen on, host:port; port 0 picks a free
	// port (see Server.Addr). Empty means DefaultAddr.
	Addr string
	// Token, when not empty, is the bearer token the write routes require
	// (Authorization: Bearer <Token>). It is compared exactly, in constant
	// time, and never logged. Empty leaves the write routes open.
	Token string
	// Gatherer is what GET /metrics exposes. Nil means
	// prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Pprof mounts net/http/pprof under /debug/pprof/ (the dispatcher's
	// --pprof). Profiles reveal internals and cost CPU while they run: keep the
	// admin address on loopback when it is on.
	Pprof bool
}

// Server is the admin HTTP server. Build it with New; it is safe for concurrent
// use.
type Server struct {
	ctl      Control
	log      zerolog.Logger
	addr     string
	auth     bool
	tokenSum [sha256.Size]byte
	handler  http.Handler
	srv      *http.Server

	setMu sync.Mutex // serialises POST /busy_threshold: read, merge, apply

	mu      sync.Mutex // guards ln and closed
	ln      net.Listener
	closed  bool
	serving chan struct{} // closed when Serve returns
}

// New builds the server and its handler for ctl; it does not listen (see
// Start). log gets the field component=admin.
func New(c Config, ctl Control, log zerolog.Logger) *Server {
	s := &Server{
		ctl:     ctl,
		log:     log.With().Str("component", "admin").Logger(),
		addr:    c.Addr,
		auth:    c.Token != "",
		serving: make(chan struct{}),
	}
	if s.addr == "" {
		s.addr = DefaultAddr
	}
	if s.auth {
		s.tokenSum = sha256.Sum256([]byte(c.Token))
	}
	g := c.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	errLog := newStdLogger(s.log)

	mux := http.NewServeMux()
	mux.Handle("/busy_threshold", s.methods(map[string]http.HandlerFunc{
		http.MethodGet:  s.getBusyThreshold,
		http.MethodPost: s.postBusyThreshold,
	}))
	mux.Handle("/metrics", s.methods(map[string]http.HandlerFunc{
		http.MethodGet: promhttp.HandlerFor(g, promhttp.HandlerOpts{
			ErrorLog:      errLog,
			ErrorHandling: promhttp.ContinueOnError,
		}).ServeHTTP,
	}))
	mux.Handle("/healthz", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.healthz}))
	mux.Handle("/readyz", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.readyz}))
	mux.Handle("/debug/queues", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.debugQueues}))
	mux.Handle("/ui", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.ui})) // read-only, like every GET (ui.go)
	if c.Pprof {
		// The token guards pprof as it guards writes: its command line
		// carries --admin-token (and --nats-password) when they were given
		// as flags, and a profile costs the running dispatcher CPU.
		for path, h := range map[string]http.HandlerFunc{
			"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline, "/debug/pprof/profile": pprof.Profile,
			"/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace,
		} {
			mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
				if s.authorized(w, r) {
					h(w, r)
				}
			})
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s", r.URL.Path))
	})
	s.handler = s.recoverer(mux)

	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          errLog,
	}
	return s
}

// Handler returns the server's routes, for tests or to mount elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on the configured address, returning a bind error at once, and
// then serves in a background goroutine until Shutdown. It may be called once.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("admin: start: server shut down")
	}
	if s.ln != nil {
		return errors.New("admin: start: already started")
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("admin: listen %s: %w", s.addr, err)
	}
	s.ln = ln
	go func() {
		defer close(s.serving)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("admin server stopped")
		}
	}()
	s.log.Info().Str("addr", ln.Addr().String()).Bool("auth", s.auth).Msg("admin server listening")
	if !s.auth && !isLoopback(ln.Addr()) {
		s.log.Warn().Str("addr", ln.Addr().String()).
			Msg("admin write routes have no token and listen beyond loopback")
	}
	return nil
}

// Addr returns the address the server listens on once started (with the actual
// port when the configured one is 0), else the configured address.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.addr
}

// Shutdown stops accepting connections and waits, until ctx is done, for the
// requests in progress to finish (http.Server.Shutdown). Calling it before
// Start, or again, is harmless; the server cannot be started after it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	started := s.ln != nil
	s.closed = true
	s.mu.Unlock()
	if !started {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	select {
	case <-s.serving:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("admin: shutdown: %w", ctx.Err())
	}
}

// methods routes by method, answering 405 with an Allow header (and a JSON
// body) to any other. GET also serves HEAD.
func (s *Server) methods(hs map[string]http.HandlerFunc) http.Handler {
	if h, ok := hs[http.MethodGet]; ok {
		if _, ok := hs[http.MethodHead]; !ok {
			hs[http.MethodHead] = h
		}
	}
	allow := make([]string, 0, len(hs))
	for m := range hs {
		allow = append(allow, m)
	}
	slices.Sort(allow)
	allowHeader := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := hs[r.Method]
		if !ok {
			w.Header().Set("Allow", allowHeader)
			writeError(w, http.StatusMethodNotAllowed,
				fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allowHeader))
			return
		}
		h(w, r)
	})
}

// authorized reports whether r carries the configured bearer token, or no token
// is configured. If not, it has answered 401.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if !s.auth {
		return true
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	cred = strings.TrimLeft(cred, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		s.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Str("remote", r.RemoteAddr).
			Msg("admin write refused: no bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairdispatch"`)
		writeError(w, http.StatusUnauthorized, "missing bearer token (Authorization: Bearer <token>)")
		return false
	}
	// Hashing first makes the comparison independent of the token's length.
	sum := sha256.Sum256([]byte(cred))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		s.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Str("remote", r.RemoteAddr).
			Msg("admin write refused: wrong bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairdispatch", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "invalid bearer token")
		return false
	}
	return true
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.ctl.Ready(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) debugQueues(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(s.ctl.Queues())
	if err != nil {
		s.log.Error().Err(err).Msg("encode debug queues")
		writeError(w, http.StatusInternalServerError, "encode queues: "+err.Error())
		return
	}
	writeBody(w, http.StatusOK, b)
}

// recoverer turns a panic in a handler (a Control that panics) into a logged
// 500, so that the admin adapter never takes the connection down with it.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Str("method", r.Method).Str("path", r.URL.Path).
					Str("panic", fmt.Sprint(v)).Msg("admin handler panicked")
				writeError(w, http.StatusInternalServerError, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // not for the fixed types admin encodes
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	writeBody(w, status, b)
}

// writeError answers status with {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

type errorBody struct {
	Error string `json:"error"`
}

func writeBody(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // a failed write is the client's loss
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// newStdLogger adapts the zerolog logger for net/http and promhttp, which log
// through a *log.Logger.
func newStdLogger(l zerolog.Logger) *log.Logger {
	return log.New(stdWriter{l}, "", 0)
}

type stdWriter struct{ l zerolog.Logger }

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Warn().Msg(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
