package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/jsstorage"
	"fairdispatch/naming"
	"fairdispatch/wire"
)

// ErrIncomplete is returned with the Result when the run ended (ctx or
// Config.Timeout) before every request ended.
var ErrIncomplete = errors.New("loadgen: run ended before every request completed or was rejected")

// Progress is a snapshot of a running workload.
type Progress struct {
	// Requests is the workload's size.
	Requests int
	// Published counts acknowledged publications.
	Published int
	// Completed counts completions per class.
	Completed map[string]int
	// CompletedByKey counts completions per fairness key (Config.Tenants);
	// empty without tenants.
	CompletedByKey map[string]int
	// Rejected counts rejections over all classes.
	Rejected int
	// Refused counts publications JetStream refused for want of room (each
	// attempt; they are retried).
	Refused int
	// Elapsed is the time since the first publication.
	Elapsed time.Duration
}

// request is the bookkeeping of one published request.
type request struct {
	class       string
	isl         uint64
	key         string // Dispatch-Fairness-Key; "" when none
	tenant      string // the replay's tenant, sent or not
	publishedAt time.Time
	ended       bool
	completed   bool // its completion record came
	dispatched  bool // a "dispatched" outcome came
}

// run is one Run's mutable state.
type run struct {
	cfg   Config
	names naming.Names
	log   zerolog.Logger
	start time.Time
	// prefixes draws the prompts of a prefix workload; nil: none.
	prefixes *prefixGen

	mu          sync.Mutex
	reqs        map[string]*request
	ended       int
	total       int
	published   int
	failed      int
	refused     map[string]int // publication attempts refused for want of room, by reason
	dups        int
	completions []Completion
	rejected    []Outcome
	perClass    map[string]*ClassStats
	byKey       map[string]int // completions per fairness key
	allEnded    chan struct{}
	// awaiting counts completed requests without a "dispatched" outcome
	// yet; outcomesIn is closed once every request ended and it is 0.
	awaiting   int
	outcomesIn chan struct{}
}

// Run publishes the workload of cfg on nc and follows it until every request
// ended, ctx ends or cfg.Timeout passes. See the package documentation.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, log zerolog.Logger) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("loadgen: run id: %w", err)
		}
		cfg.RunID = hex.EncodeToString(b[:])
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	r := &run{
		cfg:        cfg,
		log:        log.With().Str("component", "loadgen").Str("run_id", cfg.RunID).Logger(),
		reqs:       map[string]*request{},
		perClass:   map[string]*ClassStats{},
		byKey:      map[string]int{},
		refused:    map[string]int{},
		allEnded:   make(chan struct{}),
		outcomesIn: make(chan struct{}),
	}
	if cfg.Prefixes.N > 0 {
		seed := cfg.Seed
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		r.prefixes = newPrefixGen(cfg.Prefixes, seed)
	}
	for _, cc := range cfg.Classes {
		r.perClass[cc.Class] = &ClassStats{}
		r.total += cc.Count
	}
	if r.total == 0 {
		close(r.allEnded)
		close(r.outcomesIn)
	}

	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*cfg.Window+2))
	if err != nil {
		return nil, fmt.Errorf("loadgen: jetstream: %w", err)
	}
	names, err := naming.New(cfg.Prefix) // validated by withDefaults
	if err != nil {
		return nil, err
	}
	r.names = names
	if err := r.ensureStream(ctx, nc, js); err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	doneSub, err := nc.Subscribe(names.DoneAll(), r.onCompletion)
	if err != nil {
		return nil, fmt.Errorf("loadgen: subscribe completions: %w", err)
	}
	defer func() { _ = doneSub.Unsubscribe() }()
	outSub, err := nc.Subscribe(inbox, r.onOutcome)
	if err != nil {
		return nil, fmt.Errorf("loadgen: subscribe outcomes %s: %w", inbox, err)
	}
	defer func() { _ = outSub.Unsubscribe() }()
	for _, s := range []*nats.Subscription{doneSub, outSub} {
		if err := s.SetPendingLimits(-1, -1); err != nil {
			return nil, fmt.Errorf("loadgen: pending limits: %w", err)
		}
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil, fmt.Errorf("loadgen: flush subscriptions: %w", err)
	}

	r.start = time.Now()
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		r.publishAll(ctx, js, inbox)
	}()

	progress := time.NewTicker(cfg.ProgressInterval)
	defer progress.Stop()
	var end error
wait:
	for {
		select {
		case <-r.allEnded:
			break wait
		case <-ctx.Done():
			end = ErrIncomplete
			break wait
		case <-progress.C:
			if cfg.OnProgress != nil {
				cfg.OnProgress(r.progress())
			}
		}
	}
	elapsed := time.Since(r.start)
	if end == nil && cfg.OutcomeWait > 0 {
		wait := time.NewTimer(cfg.OutcomeWait)
		select {
		case <-r.outcomesIn:
		case <-wait.C:
		case <-ctx.Done():
		}
		wait.Stop()
	}
	<-pubDone // every publication is settled, or ctx is done and it stops promptly
	if cfg.OnProgress != nil {
		cfg.OnProgress(r.progress())
	}
	return r.result(elapsed), end
}

// ensureStream creates the request stream when it is missing.
func (r *run) ensureStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	names := r.names
	var err error
	for {
		lctx, cancel := context.WithTimeout(ctx, streamLookupWait)
		_, err = js.Stream(lctx, names.ReqStream())
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			break
		}
		// A producer's permissions (docs/security.md) grant no JetStream
		// API: the server refuses the lookup (nats.go keeps the refusal as
		// the connection's last error) and never answers it; publishing
		// says the rest. Otherwise JetStream is slow: ask again.
		if le := nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) && strings.Contains(le.Error(), "STREAM.INFO."+names.ReqStream()) {
			r.log.Warn().Str("stream", names.ReqStream()).Str("refused", le.Error()).
				Msg("the request stream cannot be looked up (no JetStream API permission): publishing anyway, which fails if it does not exist")
			return nil
		}
		r.log.Warn().Str("stream", names.ReqStream()).Dur("waited", streamLookupWait).Msg("JetStream did not answer the request stream's lookup; asking again")
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("loadgen: look up stream %s: %w", names.ReqStream(), err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      names.ReqStream(),
		Subjects:  []string{names.ReqAll()},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("loadgen: create stream %s: %w", names.ReqStream(), err)
	}
	return nil
}

// streamLookupWait bounds the request stream's lookup (a tests' seam).
var streamLookupWait = 5 * time.Second

// order returns the class of each request in publication order.
func order(cfg Config) []string {
	var out []string
	switch cfg.Order {
	case OrderSequential, OrderRandom:
		for _, cc := range cfg.Classes {
			for range cc.Count {
				out = append(out, cc.Class)
			}
		}
		if cfg.Order == OrderRandom {
			seed := cfg.Seed
			if seed == 0 {
				seed = uint64(time.Now().UnixNano())
			}
			rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		}
	default: // alternating
		left := make([]int, len(cfg.Classes))
		for i, cc := range cfg.Classes {
			left[i] = cc.Count
		}
		for more := true; more; {
			more = false
			for i, cc := range cfg.Classes {
				if left[i] > 0 {
					out = append(out, cc.Class)
					left[i]--
					more = true
				}
			}
		}
	}
	return out
}

// replayMessage builds request n of the replay.
func (r *run) replayMessage(n int, id, inbox string) *nats.Msg {
	rr := &r.cfg.Replay.Requests[n]
	m := nats.NewMsg(r.names.Req(rr.Class))
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(wire.HeaderISLTokens, strconv.Itoa(rr.ISL))
	m.Header.Set(wire.HeaderOutputTokens, strconv.Itoa(rr.Output))
	if rr.encoded != "" {
		m.Header.Set(wire.HeaderBlockHashes, rr.encoded)
	}
	if r.cfg.Replay.SendKeys && rr.Tenant != "" {
		m.Header.Set(wire.HeaderFairnessKey, rr.Tenant)
	}
	m.Header.Set(wire.HeaderReplyTo, inbox)
	m.Data = fmt.Appendf(nil, `{"run":%q,"n":%d,"class":%q}`, r.cfg.RunID, n, rr.Class)
	return m
}

// message builds request n of class; it returns its ISL too.
func (r *run) message(n int, class, id, inbox string) (*nats.Msg, uint64) {
	cfg := r.cfg
	m := nats.NewMsg(r.names.Req(class))
	m.Header.Set(jetstream.MsgIDHeader, id)
	isl := cfg.ISL
	if r.prefixes != nil {
		hashes, _ := r.prefixes.next(n)
		isl = uint64(len(hashes) * cfg.Prefixes.BlockSize)
		m.Header.Set(wire.HeaderBlockHashes, wire.EncodeHashes(hashes))
	}
	m.Header.Set(wire.HeaderISLTokens, strconv.FormatUint(isl, 10))
	if cfg.Cached > 0 {
		m.Header.Set(wire.HeaderCachedTokens, strconv.FormatUint(cfg.Cached, 10))
	}
	m.Header.Set(wire.HeaderReplyTo, inbox)
	if cfg.OutputTokens > 0 {
		m.Header.Set(wire.HeaderOutputTokens, strconv.Itoa(cfg.OutputTokens))
	}
	if cfg.Pin != "" {
		m.Header.Set(wire.HeaderWorker, cfg.Pin)
	}
	if cfg.Priority > 0 {
		m.Header.Set(wire.HeaderPriority, strconv.FormatFloat(cfg.Priority, 'g', -1, 64))
	}
	if cfg.Strict > 0 {
		m.Header.Set(wire.HeaderStrictPriority, strconv.FormatUint(cfg.Strict, 10))
	}
	if cfg.DeadlineMs > 0 {
		m.Header.Set(wire.HeaderDeadlineMs, strconv.FormatUint(cfg.DeadlineMs, 10))
	}
	m.Data = fmt.Appendf(nil, `{"run":%q,"n":%d,"class":%q}`, cfg.RunID, n, class)
	return m, isl
}

// publishAll publishes every request, paced by Rate, with at most Window
// awaiting acknowledgement; a failed publication is retried with the same
// Nats-Msg-Id a few times, then counted as failed.
func (r *run) publishAll(ctx context.Context, js jetstream.JetStream, inbox string) {
	type inflight struct {
		id  string
		fut jetstream.PubAckFuture
	}
	window := make(chan inflight, r.cfg.Window)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for f := range window {
			var err error
			select {
			case <-f.fut.Ok():
			case err = <-f.fut.Err():
				err = r.retry(ctx, js, f.fut.Msg(), err)
			case <-ctx.Done():
				continue // unknown fate; the run is over
			}
			r.published1(f.id, err)
		}
	}()
	defer func() {
		close(window)
		<-collected
	}()

	tenants := newTenantPicker(r.cfg.Tenants)
	rp := r.cfg.Replay
	classes := order(r.cfg)
	if rp != nil {
		classes = make([]string, len(rp.Requests))
		for i := range rp.Requests {
			classes[i] = rp.Requests[i].Class
		}
	}
	for n, class := range classes {
		if r.cfg.Rate > 0 || rp != nil {
			var at time.Time
			if rp != nil {
				at = r.start.Add(time.Duration(float64(rp.Requests[n].At) / rp.Speedup))
			} else {
				at = r.start.Add(time.Duration(float64(n) / r.cfg.Rate * float64(time.Second)))
			}
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		id := r.cfg.RunID + "-" + strconv.Itoa(n)
		var q *request
		var m *nats.Msg
		if rp != nil {
			rr := &rp.Requests[n]
			m = r.replayMessage(n, id, inbox)
			q = &request{class: class, isl: uint64(rr.ISL), tenant: rr.Tenant}
			if rp.SendKeys {
				q.key = rr.Tenant
			}
		} else {
			var isl uint64
			m, isl = r.message(n, class, id, inbox)
			key := tenants.next(class)
			if key != "" {
				m.Header.Set(wire.HeaderFairnessKey, key)
			}
			q = &request{class: class, isl: isl, key: key, tenant: key}
		}
		q.publishedAt = time.Now()
		r.mu.Lock()
		r.reqs[id] = q
		r.mu.Unlock()
		fut, err := js.PublishMsgAsync(m)
		if err != nil {
			r.published1(id, r.retry(ctx, js, m, err))
			continue
		}
		select {
		case window <- inflight{id: id, fut: fut}:
		case <-ctx.Done():
			return
		}
	}
}

// Backoff of a publication JetStream refused for want of room.
const (
	refusedRetryMin = 50 * time.Millisecond
	refusedRetryMax = 2 * time.Second
)

// retry republishes m synchronously (same Nats-Msg-Id) after the failure
// err. A refusal for want of room (docs/protocol.md, When a stream or the
// store is full) is counted by its reason and retried with backoff (50 ms
// doubling to 2 s) until it is stored or the run ends, as a producer should;
// another failure is retried at once, up to 5 times.
func (r *run) retry(ctx context.Context, js jetstream.JetStream, m *nats.Msg, err error) error {
	id := m.Header.Get(jetstream.MsgIDHeader)
	wait, others := refusedRetryMin, 0
	for ctx.Err() == nil {
		if reason, ok := jsstorage.Refused(err); ok {
			r.refusal(id, reason, wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("loadgen: publish %s: %w", id, err)
			case <-t.C:
			}
			wait = min(2*wait, refusedRetryMax)
		} else if others++; others > 5 {
			break
		} else {
			r.log.Debug().Err(err).Str("request_id", id).Int("attempt", others).Msg("republish")
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = js.PublishMsg(pctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("loadgen: publish %s: %w", id, err)
}

// refusal counts one publication attempt refused for want of room; the first
// of each reason is logged at warn.
func (r *run) refusal(id, reason string, retryIn time.Duration) {
	r.mu.Lock()
	r.refused[reason]++
	first := r.refused[reason] == 1
	r.mu.Unlock()
	ev := r.log.Debug()
	if first {
		ev = r.log.Warn()
	}
	ev.Str("request_id", id).Str("reason", reason).Dur("retry_in", retryIn).
		Msg("publication refused by JetStream for want of room; retrying with the same Nats-Msg-Id (later refusals are logged at debug)")
}

// published1 records the fate of one publication.
func (r *run) published1(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.reqs[id]
	if err != nil {
		r.log.Error().Err(err).Str("request_id", id).Msg("publication failed")
		r.failed++
		r.endLocked(q)
		return
	}
	r.published++
	r.perClass[q.class].Published++
}

// endLocked marks q ended; r.mu must be held.
func (r *run) endLocked(q *request) {
	if q.ended {
		return
	}
	q.ended = true
	r.ended++
	if r.ended == r.total {
		close(r.allEnded)
	}
	r.outcomesInLocked()
}

// outcomesInLocked closes outcomesIn once every request ended and each
// completed one had its "dispatched" outcome; r.mu must be held.
func (r *run) outcomesInLocked() {
	if r.ended == r.total && r.awaiting == 0 {
		select {
		case <-r.outcomesIn:
		default:
			close(r.outcomesIn)
		}
	}
}

// completionRecord is the worker's record on <prefix>.done.<worker_id>.
type completionRecord = wire.Completion

func (r *run) onCompletion(m *nats.Msg) {
	var rec completionRecord
	if err := json.Unmarshal(m.Data, &rec); err != nil {
		r.log.Warn().Err(err).Str("subject", m.Subject).Msg("undecodable completion record")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.reqs[rec.RequestID]
	if !ok {
		return // another run's
	}
	if q.ended {
		r.dups++
		return
	}
	if q.key != "" {
		r.byKey[q.key]++
	}
	finished := rec.FinishedAt
	if finished.IsZero() {
		finished = time.Now() // a worker that sends no timings (they are not the protocol's): when the record came
	}
	c := Completion{
		RequestID: rec.RequestID, Class: q.class, Key: q.key, Tenant: q.tenant, PhysicalClass: rec.Class, WorkerID: rec.WorkerID,
		DPRank: rec.DPRank, Seq: rec.Seq, QueuedMs: rec.QueuedMs, PublishedAt: q.publishedAt,
		ReceivedAt: rec.ReceivedAt, StartedAt: rec.StartedAt, FirstTokenAt: rec.FirstTokenAt, FinishedAt: finished,
		Latency: finished.Sub(q.publishedAt), PromptTokens: q.isl, CachedTokens: rec.CachedTokens,
		PrefillTokens: rec.PrefillTokens, OutputTokens: rec.OutputTokens, Status: rec.Status,
	}
	if !rec.FirstTokenAt.IsZero() {
		c.TTFT = rec.FirstTokenAt.Sub(q.publishedAt)
	}
	r.completions = append(r.completions, c)
	r.perClass[q.class].Completed++
	q.completed = true
	if !q.dispatched {
		r.awaiting++
	}
	r.endLocked(q)
}

func (r *run) onOutcome(m *nats.Msg) {
	var o Outcome
	if err := json.Unmarshal(m.Data, &o); err != nil {
		r.log.Warn().Err(err).Msg("undecodable outcome")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q, ok := r.reqs[o.RequestID]
	if !ok {
		r.log.Warn().Str("request_id", o.RequestID).Msg("outcome for an unknown request")
		return
	}
	o.Class = q.class
	st := r.perClass[q.class]
	switch o.Status {
	case "dispatched":
		st.Dispatched++
		if !q.dispatched {
			q.dispatched = true
			if q.completed {
				r.awaiting--
				r.outcomesInLocked()
			}
		}
	case "rejected":
		if q.ended {
			return
		}
		st.Rejected++
		if st.Errors == nil {
			st.Errors = map[string]int{}
		}
		st.Errors[o.Error]++
		r.rejected = append(r.rejected, o)
		r.endLocked(q)
	default:
		r.log.Warn().Str("status", o.Status).Str("request_id", o.RequestID).Msg("unknown outcome status")
	}
}

func (r *run) progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{Requests: r.total, Published: r.published, Rejected: len(r.rejected), Refused: sumCounts(r.refused),
		Completed: make(map[string]int, len(r.perClass)), Elapsed: time.Since(r.start)}
	for c, st := range r.perClass {
		p.Completed[c] = st.Completed
	}
	p.CompletedByKey = make(map[string]int, len(r.byKey))
	for k, n := range r.byKey {
		p.CompletedByKey[k] = n
	}
	return p
}

func (r *run) result(elapsed time.Duration) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{
		RunID: r.cfg.RunID, Requests: r.total, Published: r.published, PublishFailed: r.failed,
		Completions: append([]Completion(nil), r.completions...),
		Rejected:    append([]Outcome(nil), r.rejected...),
		Duplicates:  r.dups, PerClass: map[string]ClassStats{}, Elapsed: elapsed,
		Refused:     maps.Clone(r.refused),
		KeyRequests: r.keyRequestsLocked(),
		Complete:    r.ended == r.total,
	}
	secs := elapsed.Seconds()
	var all []time.Duration
	byClass := map[string][]time.Duration{}
	for _, c := range res.Completions {
		all = append(all, c.Latency)
		byClass[c.Class] = append(byClass[c.Class], c.Latency)
	}
	for _, cc := range r.cfg.Classes {
		res.Classes = append(res.Classes, cc.Class)
		st := *r.perClass[cc.Class]
		st.P50, st.P90, st.P99 = percentiles(byClass[cc.Class])
		if secs > 0 {
			st.Throughput = float64(st.Completed) / secs
		}
		res.PerClass[cc.Class] = st
	}
	var prompt, cached uint64
	for _, c := range res.Completions {
		prompt += c.PromptTokens
		cached += min(c.CachedTokens, c.PromptTokens)
	}
	if prompt > 0 {
		res.CacheHitRate = float64(cached) / float64(prompt)
	}
	res.P50, res.P90, res.P99 = percentiles(all)
	if secs > 0 {
		res.Throughput = float64(len(res.Completions)) / secs
	}
	return res
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// keyRequestsLocked counts the requests published under each fairness key;
// nil without tenants. r.mu must be held.
func (r *run) keyRequestsLocked() map[string]int {
	if len(r.cfg.Tenants) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, q := range r.reqs {
		if q.key != "" {
			out[q.key]++
		}
	}
	return out
}

// tenantPicker assigns fairness keys to each class's requests in a smooth
// weighted round robin (each step, every tenant earns its weight and the
// richest, paying the total, is picked), so the mix is even at every scale.
type tenantPicker struct {
	tenants []Tenant
	total   int
	credit  map[string][]int // class -> credit per tenant
}

func newTenantPicker(ts []Tenant) *tenantPicker {
	p := &tenantPicker{tenants: ts, credit: map[string][]int{}}
	for _, t := range ts {
		p.total += t.Weight
	}
	return p
}

// next returns the key of class's next request, "" without tenants.
func (p *tenantPicker) next(class string) string {
	if len(p.tenants) == 0 {
		return ""
	}
	c := p.credit[class]
	if c == nil {
		c = make([]int, len(p.tenants))
		p.credit[class] = c
	}
	best := 0
	for i, t := range p.tenants {
		c[i] += t.Weight
		if c[i] > c[best] {
			best = i
		}
	}
	c[best] -= p.total
	return p.tenants[best].Key
}
