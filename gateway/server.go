package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"fairdispatch/caller"
	"fairdispatch/tokenizer"
	"fairdispatch/wire"
)

// Request headers a client may send beside the OpenAI API's.
const (
	HeaderClass       = "X-Fairdispatch-Class"
	HeaderPriority    = "X-Fairdispatch-Priority"
	HeaderDeadlineMs  = "X-Fairdispatch-Deadline-Ms"
	HeaderIdempotency = "Idempotency-Key"
	// HeaderRequestID is the response header naming the request id (the
	// official clients keep it as the response's request id).
	HeaderRequestID = "X-Request-Id"
)

// Options configures a Server.
type Options struct {
	// Config is the models and tenants (LoadConfig).
	Config *Config
	// Callers holds one caller per pool prefix of Config.Models.
	Callers map[string]*caller.Caller
	// Tokenizers holds the tokenizer of each model that has one, by model
	// name; nil: LoadTokenizers(Config) loads those the file names.
	Tokenizers map[string]Tokenizer
	// Limits bounds request bodies.
	Limits Limits
	// MaxBodyBytes bounds a request body (default 896 KiB, 128 KiB under
	// nats-server's default max_payload for the headers); over it: 413.
	MaxBodyBytes int64
	// RequestTimeout bounds a request from arrival to its end (default 10m).
	RequestTimeout time.Duration
	// WriteTimeout bounds each write to a client (default 30 s): a client
	// that reads slower is dropped, and its request cancelled.
	WriteTimeout time.Duration
	// AttachWait bounds how long a deduplicated retry waits for a sign of
	// the first attempt's response before it is answered 409 (default 10 s).
	AttachWait time.Duration
	// Health reports whether each pool's dispatcher is reachable; nil: always.
	Health func(prefix string) error
	// Registerer receives the metrics; nil: a private registry.
	Registerer prometheus.Registerer
	// Log is the logger; the server adds component=gateway.
	Log zerolog.Logger
}

// LoadTokenizers loads the tokenizer of each model of cfg that names a
// directory. A tokenizer this gateway cannot run exactly is an error: the
// file asked for exact counts.
func LoadTokenizers(cfg *Config) (map[string]Tokenizer, error) {
	out := map[string]Tokenizer{}
	for _, m := range cfg.Models {
		if m.Tokenizer == "" {
			continue
		}
		t, err := tokenizer.Load(m.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("gateway: model %s: %w", m.Name, err)
		}
		out[m.Name] = t
	}
	return out, nil
}

// pool is one model and its caller.
type pool struct {
	model  Model
	caller *caller.Caller
	tok    Tokenizer
}

// tenant is a tenant with its count of requests in flight.
type tenant struct {
	Tenant
	inflight atomic.Int64
}

// Server is the OpenAI-compatible HTTP API. It holds no state about requests
// beyond their connections: any number run side by side.
type Server struct {
	opt     Options
	pools   map[string]*pool
	models  []string
	keys    map[string]*tenant // by key digest
	m       *metrics
	log     zerolog.Logger
	created int64
	mux     *http.ServeMux
}

// New returns a server for opt, or an error when a model's pool has no caller.
func New(opt Options) (*Server, error) {
	if opt.Config == nil {
		return nil, errors.New("gateway: no config")
	}
	opt.Limits = opt.Limits.withDefaults()
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 896 << 10
	}
	if opt.RequestTimeout <= 0 {
		opt.RequestTimeout = 10 * time.Minute
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = 30 * time.Second
	}
	if opt.AttachWait <= 0 {
		opt.AttachWait = 10 * time.Second
	}
	if opt.Registerer == nil {
		opt.Registerer = prometheus.NewRegistry()
	}
	if opt.Tokenizers == nil {
		var err error
		if opt.Tokenizers, err = LoadTokenizers(opt.Config); err != nil {
			return nil, err
		}
	}
	s := &Server{opt: opt, pools: map[string]*pool{}, keys: map[string]*tenant{},
		log: opt.Log.With().Str("component", "gateway").Logger(), created: time.Now().Unix()}
	for name, tok := range opt.Tokenizers {
		if t, ok := tok.(interface{ HasChatTemplate() bool }); ok && !t.HasChatTemplate() {
			s.log.Warn().Str("model", name).Msg("the model's tokenizer has no chat template (chat_template.jinja, or tokenizer_config.json's chat_template): " +
				"chat requests are estimated and carry no block hashes; completions are exact")
		}
	}
	for _, m := range opt.Config.Models {
		c := opt.Callers[m.Prefix]
		if c == nil {
			return nil, fmt.Errorf("gateway: model %s: no caller for prefix %s", m.Name, m.Prefix)
		}
		s.pools[m.Name] = &pool{model: m, caller: c, tok: opt.Tokenizers[m.Name]}
		s.models = append(s.models, m.Name)
	}
	for i := range opt.Config.Tenants {
		t := &tenant{Tenant: opt.Config.Tenants[i]}
		for _, h := range t.APIKeySHA256 {
			s.keys[h] = t
		}
	}
	s.m = newMetrics(opt.Registerer)
	for _, t := range opt.Config.Tenants {
		s.m.inflight.WithLabelValues(t.Name).Set(0)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, APIChat) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, APICompletions) })
	s.mux.HandleFunc("GET /v1/models", s.listModels)
	s.mux.HandleFunc("GET /v1/models/{model...}", s.getModel)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { errNotFoundRoute.write(w) })
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// authenticate returns the tenant of the request's bearer key, or nil.
func (s *Server) authenticate(r *http.Request) *tenant {
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || key == "" {
		return nil
	}
	return s.keys[HashKey(strings.TrimSpace(key))]
}

// model is a model object of the OpenAI API.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) model(name string) model {
	return model{ID: name, Object: "model", Created: s.created, OwnedBy: "fairdispatch"}
}

// modelNotFound is the answer for a model the gateway does not serve.
func modelNotFound(name string) *apiError {
	return &apiError{status: 404, typ: typeNotFound, code: "model_not_found", param: "model", noRetry: true,
		msg: fmt.Sprintf("the model %q does not exist; GET /v1/models lists those served", cut(name, 64))}
}

// authorized reports whether r carries a tenant's key, answering 401 when not.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.authenticate(r) == nil {
		s.m.answered("", "", "", 401)
		errUnauthorized.write(w)
		return false
	}
	return true
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, name := range s.models {
		out.Data = append(out.Data, s.model(name))
	}
	writeJSON(w, out)
}

// getModel answers GET /v1/models/{model} (the clients' models.retrieve):
// the model object, or 404 model_not_found.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	name := r.PathValue("model")
	if s.pools[name] == nil {
		modelNotFound(name).write(w)
		return
	}
	writeJSON(w, s.model(name))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// readBody reads the request body within MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > s.opt.MaxBodyBytes {
		return nil, &apiError{status: 413, typ: typeInvalidRequest, code: "body_too_large",
			msg: fmt.Sprintf("the request body is %d bytes, over the limit of %d", r.ContentLength, s.opt.MaxBodyBytes), noRetry: true}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, &apiError{status: 413, typ: typeInvalidRequest, code: "body_too_large",
				msg: fmt.Sprintf("the request body is over the limit of %d bytes", s.opt.MaxBodyBytes), noRetry: true}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, &apiError{status: 408, typ: typeTimeout, code: "body_timeout", msg: "the request body did not arrive in time"}
		}
		return nil, &apiError{status: 400, typ: typeInvalidRequest, code: "body_unreadable", msg: "the request body could not be read: " + err.Error()}
	}
	return body, nil
}

// requestID is the request id: from the tenant, its Idempotency-Key and
// what it asks (the API, the model and the body published), so that a retry,
// from any gateway, is the same JetStream message, and a key used again for
// another request is another request (not the first one's answer, nor, on
// another model's pool, a response subject shared with it); else random.
func requestID(tenant, idem, api, model string, body []byte) string {
	if idem != "" {
		asked := sha256.Sum256(body)
		sum := sha256.Sum256([]byte(tenant + "\n" + idem + "\n" + api + "\n" + model + "\n" + string(asked[:])))
		return "k" + hex.EncodeToString(sum[:16])
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "g" + hex.EncodeToString(b[:])
}

// route is what the gateway decided for one request before publishing it.
type route struct {
	t        *tenant
	p        *pool
	req      *request
	class    string
	priority float64
	deadline uint64
	idem     string
	client   context.Context // the HTTP request's: done when the client went away
}

func (rt *route) ctxDone() bool { return rt.client.Err() != nil }

// prepare authenticates, reads and checks the request.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, api string) (*route, *apiError) {
	t := s.authenticate(r)
	if t == nil {
		return nil, errUnauthorized
	}
	rt := &route{t: t, class: t.DefaultClass}
	body, e := s.readBody(w, r)
	if e != nil {
		return rt, e
	}
	req, e := parseRequest(api, body, s.opt.Limits)
	if e != nil {
		return rt, e
	}
	rt.req = req
	p := s.pools[req.model]
	if p == nil {
		return rt, modelNotFound(req.model)
	}
	rt.p = p
	if req.maxTokens > p.model.MaxTokens {
		return rt, badRequest("max_tokens_too_large", req.maxField, "%s %d is over this model's limit of %d", req.maxField, req.maxTokens, p.model.MaxTokens)
	}
	if c := r.Header.Get(HeaderClass); c != "" {
		if !t.allows(c) {
			rt.class = ""
			return rt, &apiError{status: 403, typ: typePermission, code: "class_not_allowed", noRetry: true,
				msg: fmt.Sprintf("%s %q is not a class this key may use (%s)", HeaderClass, cut(c, 64), strings.Join(t.Classes, ", "))}
		}
		rt.class = c
	}
	rt.priority = t.Priority
	if v := r.Header.Get(HeaderPriority); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > maxPriority {
			return rt, badRequest("invalid_header", HeaderPriority, "%s %q: want a number from 0 to 10^6", HeaderPriority, cut(v, 64))
		}
		if f > *t.MaxPriority {
			return rt, &apiError{status: 403, typ: typePermission, code: "priority_not_allowed", noRetry: true,
				msg: fmt.Sprintf("%s %v is over this key's limit of %v", HeaderPriority, f, *t.MaxPriority)}
		}
		rt.priority = f
	}
	rt.deadline = t.DeadlineMs
	if v := r.Header.Get(HeaderDeadlineMs); v != "" {
		d, err := strconv.ParseUint(v, 10, 64)
		if err != nil || d == 0 || d > maxDeadlineMs {
			return rt, badRequest("invalid_header", HeaderDeadlineMs, "%s %q: want 1 to 86400000", HeaderDeadlineMs, cut(v, 64))
		}
		if t.DeadlineMs == 0 || d < t.DeadlineMs {
			rt.deadline = d
		}
	}
	if k := r.Header.Get(HeaderIdempotency); k != "" {
		if len(k) > 256 {
			return rt, badRequest("invalid_header", HeaderIdempotency, "%s: at most 256 bytes", HeaderIdempotency)
		}
		rt.idem = k
	}
	return rt, nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// complete serves POST /v1/chat/completions and /v1/completions.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, api string) {
	arrived := time.Now()
	rt, e := s.prepare(w, r, api)
	tenantName, class, model := "", "", ""
	if rt != nil {
		tenantName, class = rt.t.Name, rt.class
		if rt.p != nil {
			model = rt.p.model.Name
		}
	}
	if e != nil {
		s.m.answered(tenantName, class, model, e.status)
		e.write(w)
		return
	}
	t := rt.t
	if n := t.inflight.Add(1); n > int64(t.MaxConcurrent) {
		t.inflight.Add(-1)
		e := &apiError{status: 429, typ: typeRateLimit, code: "concurrency_limit", retryAfter: errRetryAfter,
			msg: fmt.Sprintf("this key has %d requests in flight on this gateway, its limit", t.MaxConcurrent)}
		s.m.answered(t.Name, class, model, e.status)
		e.write(w)
		return
	}
	s.m.inflight.WithLabelValues(t.Name).Inc()
	defer func() {
		t.inflight.Add(-1)
		s.m.inflight.WithLabelValues(t.Name).Dec()
	}()
	status := s.run(w, r, rt, arrived)
	s.m.answered(t.Name, class, model, status)
	s.m.duration.WithLabelValues(class, strconv.FormatBool(rt.req.stream)).Observe(time.Since(arrived).Seconds())
}

// run publishes the request and relays its response; it returns the HTTP
// status sent (0 when the client went away first).
func (s *Server) run(w http.ResponseWriter, r *http.Request, rt *route, arrived time.Time) int {
	p, req := rt.p, rt.req
	rt.client = r.Context()
	if s.opt.Health != nil {
		if err := s.opt.Health(p.model.Prefix); err != nil {
			e := &apiError{status: 503, typ: typeUnavailable, code: "dispatcher_unreachable", retryAfter: errRetryAfter,
				msg: "the dispatcher of this model cannot be reached: " + err.Error()}
			e.write(w)
			return e.status
		}
	}
	n, ids, exact := count(p.tok, req)
	body, err := req.normalise(p.model.EngineModel, p.model.DefaultMaxTokens)
	if err != nil {
		e := fromCall(err)
		e.write(w)
		return e.status
	}
	h := nats.Header{}
	h.Set(wire.HeaderAPI, req.api)
	h.Set(wire.HeaderFairnessKey, rt.t.Name)
	h.Set(wire.HeaderISLTokens, strconv.FormatUint(n, 10))
	if exact && len(ids) >= p.model.BlockSize {
		blocks := ids[:min(len(ids), wire.MaxHashes*p.model.BlockSize)]
		h.Set(wire.HeaderBlockHashes, wire.EncodeHashes(wire.ChainHashes(nil, blocks, p.model.BlockSize)))
	}
	if rt.priority > 0 {
		h.Set(wire.HeaderPriority, strconv.FormatFloat(rt.priority, 'g', -1, 64))
	}
	if rt.deadline > 0 {
		h.Set(wire.HeaderDeadlineMs, strconv.FormatUint(rt.deadline, 10))
	}
	s.m.tokens.WithLabelValues(rt.t.Name, rt.class, "estimated").Add(float64(n))

	ctx, cancel := context.WithTimeout(r.Context(), s.opt.RequestTimeout)
	defer cancel()
	id := requestID(rt.t.Name, rt.idem, rt.req.api, p.model.Name, body)
	log := s.log.With().Str("request_id", id).Str("tenant", rt.t.Name).Str("class", rt.class).Logger()
	call, err := p.caller.Start(ctx, caller.Request{ID: id, Class: rt.class, Header: h, Body: body, KeepUnconfirmed: rt.idem != ""})
	if err != nil {
		if r.Context().Err() != nil { // the client left while it was published
			s.m.clientGone.Inc()
			return 0
		}
		e := fromCall(err)
		log.Warn().Err(err).Msg("request not accepted")
		w.Header().Set(HeaderRequestID, id)
		e.write(w)
		return e.status
	}
	defer call.Close()
	if call.Duplicate() {
		s.m.duplicates.Inc()
	}
	w.Header().Set(HeaderRequestID, id)
	x := &exchange{s: s, w: w, call: call, rt: rt, arrived: arrived, log: log}
	var status int
	if req.stream {
		status = x.stream(ctx)
	} else {
		status = x.whole(ctx)
	}
	log.Debug().Int("status", status).Int("chunks", x.chunks).Bool("stream", req.stream).Bool("duplicate", call.Duplicate()).
		Dur("duration", time.Since(arrived)).Uint64("isl", n).Msg("request done")
	return status
}
