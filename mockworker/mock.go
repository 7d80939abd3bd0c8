package mockworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/spin"
	"fairdispatch/mockworker/batching"
	"fairdispatch/naming"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	DefaultMaxNumSeqs          = 4
	DefaultMaxNumBatchedTokens = 8192
	DefaultPrefillTokensPerSec = 20000
	DefaultDecodePerToken      = 5 * time.Millisecond
	DefaultOutputTokens        = 1
	DefaultBlockSize           = 16
)

// ackWorkers bounds the goroutines ending the responses of one Worker (see
// complete).
const ackWorkers = 8

// Config describes one simulated engine.
type Config struct {
	// ID, Prefix, DPStart, DPSize, TotalKVBlocks, Taints, TTL and AckWait are
	// passed to the worker helper (see workerkit.Config for units and bounds).
	ID            string
	Prefix        string
	DPStart       int
	DPSize        int
	TotalKVBlocks uint64
	Taints        []string
	TTL           time.Duration
	AckWait       time.Duration
	// HeaderForm is passed to the helper: dispatches in the header form
	// rather than the compact form (docs/protocol.md, Compact dispatch form).
	HeaderForm bool
	// Preempt declares preemption support (docs/protocol.md, Preemption):
	// a job the dispatcher preempts before its first response chunk leaves
	// the engine at once and its request is handed back.
	Preempt bool
	// MaxActiveRequests is reported as max_active_requests (0: omitted): the
	// dispatcher then sends a rank no more than that many requests at once,
	// running or waiting.
	MaxActiveRequests uint64
	// MaxNumSeqs is the number of concurrent sequences per rank, default 4, >= 1.
	MaxNumSeqs int
	// MaxNumBatchedTokens is reported to the dispatcher, default 8192; it does not
	// limit the simulation.
	MaxNumBatchedTokens uint64
	// PrefillTokensPerSec is the prefill speed of one sequence in tokens per
	// second, default 20000, > 0.
	PrefillTokensPerSec float64
	// DecodePerToken is the time of one decode step (every output token after
	// the first), default 5ms, >= 0.
	DecodePerToken time.Duration
	// OutputTokens is the number of output tokens of a request without a
	// Dispatch-Output-Tokens header, default 1, >= 1.
	OutputTokens int
	// BlockSize is the KV block size in tokens, default 16.
	BlockSize int
	// RefuseWhenFull, when > 0, refuses (busy) a request that would make its
	// rank's waiting queue longer than RefuseWhenFull; 0 accepts everything.
	RefuseWhenFull int
	// PlainAcks is passed to the helper (workerkit.Config.PlainAcks): the
	// worker acknowledges with plain publishes, which need no inbox but can
	// be lost around a NATS server restart or a reconnection (the request
	// then runs again after its ack wait unless it comes back to this
	// worker). By default (false) acknowledgements are confirmed: sent as
	// requests and sent again until JetStream answers (workerkit.Request.Done),
	// from the helper's background retrier, with an identical copy of the
	// completion record ahead of each attempt (workerkit.Request.DoneAfter),
	// so that the attempt JetStream confirms follows a copy of the record in
	// the same connection even when an earlier one was lost with a server.
	// The worker's connection must then be allowed to receive replies on its
	// inbox (configs/nats-accounts.conf: the subscribe grant and inbox
	// prefix); without, every acknowledgement is retried for AckWait.
	PlainAcks bool
	// ConfirmAcks is ignored: acknowledgements are confirmed by default.
	//
	// Deprecated: set PlainAcks to opt out of confirmed acknowledgements.
	ConfirmAcks bool
	// PreciseTimers, when true, ends each simulated service time within
	// microseconds rather than up to a millisecond late, as a Go timer in an
	// idle process fires (internal/spin). It yields the CPU in a loop for up
	// to 1.5 ms before each event, so it is for benchmarks that compare
	// short service times (cmd/bench's seed burst and idle-capacity curve).
	PreciseTimers bool
	// KVCapacity, when > 0, gives each rank a simulated prefix cache of
	// that many device blocks (LRU), fed by the requests'
	// Dispatch-Block-Hashes, whose changes the worker publishes as KV cache
	// events (docs/protocol.md, KV cache events; prefixcache.go). A request
	// with hashes then prefills only the tokens its rank's cache lacks, and
	// CacheStats and the completion record's cached_tokens tell the hits.
	KVCapacity int
	// KVHostCapacity, with KVCapacity, adds a host tier of that many blocks
	// per rank: blocks evicted from the device move there (LRU) and count
	// as cached. 0: none.
	KVHostCapacity int
	// CostFactor scales the prefill_tokens the completion record reports: the
	// request's uncached tokens times CostFactor, so that tests can make the
	// dispatcher's estimate wrong on purpose (docs/design.md, Cost settlement).
	// Default 1 (exact), > 0, at most 1000. The simulation itself runs the
	// uncached tokens.
	CostFactor float64
	// KeyCostFactors overrides CostFactor per fairness key (Dispatch-Fairness-Key;
	// "_" for a request without one), each in (0, 1000], so that a test can
	// mis-estimate one tenant's requests and not another's.
	KeyCostFactors map[string]float64
	// Model, when not nil, replaces the simulation above with a continuously
	// batched engine per rank (package mockworker/batching: chunked prefill,
	// decode steps that slow with the batch, a KV block pool that is also
	// the prefix cache, timings from Model, scaled by Model.Speedup). Its
	// cache publishes KV cache events like KVCapacity's, which must then be
	// 0; BlockSize defaults to Model.BlockSize and must equal it;
	// MaxNumSeqs, PrefillTokensPerSec and DecodePerToken are not used, and
	// MaxNumBatchedTokens and TotalKVBlocks default to the model's. A
	// request's prompt is Dispatch-ISL-Tokens with Dispatch-Block-Hashes,
	// its output Dispatch-Output-Tokens (or OutputTokens).
	Model *batching.Model
	// NoCompletions, when true, publishes no completion record: the worker
	// leaves the dispatcher's estimates uncorrected (docs/design.md, Cost
	// settlement), as a worker that does not implement records does.
	NoCompletions bool
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Model != nil {
		if err := c.Model.Validate(); err != nil {
			errs = append(errs, err)
		}
		c.BlockSize = cmp.Or(c.BlockSize, c.Model.BlockSize)
		c.MaxNumBatchedTokens = cmp.Or(c.MaxNumBatchedTokens, uint64(c.Model.MaxBatchedTokens))
		c.TotalKVBlocks = cmp.Or(c.TotalKVBlocks, uint64(c.Model.KVBlocks))
		if c.BlockSize != c.Model.BlockSize || c.KVCapacity != 0 {
			errs = append(errs, fmt.Errorf("with a model: block size %d must be the model's %d, and kv capacity %d must be 0 (the model's pool is the cache)",
				c.BlockSize, c.Model.BlockSize, c.KVCapacity))
		}
	}
	c.MaxNumSeqs = cmp.Or(c.MaxNumSeqs, DefaultMaxNumSeqs)
	c.MaxNumBatchedTokens = cmp.Or(c.MaxNumBatchedTokens, DefaultMaxNumBatchedTokens)
	c.PrefillTokensPerSec = cmp.Or(c.PrefillTokensPerSec, DefaultPrefillTokensPerSec)
	c.DecodePerToken = cmp.Or(c.DecodePerToken, DefaultDecodePerToken)
	c.OutputTokens = cmp.Or(c.OutputTokens, DefaultOutputTokens)
	c.BlockSize = cmp.Or(c.BlockSize, DefaultBlockSize)
	c.Prefix = cmp.Or(c.Prefix, workerkit.DefaultPrefix)
	c.DPSize = cmp.Or(c.DPSize, 1)
	c.CostFactor = cmp.Or(c.CostFactor, 1)
	if c.CostFactor < 0 || c.CostFactor > 1000 || math.IsNaN(c.CostFactor) {
		errs = append(errs, fmt.Errorf("cost factor %v: want in (0, 1000]", c.CostFactor))
	}
	for k, f := range c.KeyCostFactors {
		if !(f > 0 && f <= 1000) {
			errs = append(errs, fmt.Errorf("cost factor %v of key %q: want in (0, 1000]", f, k))
		}
	}
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max num seqs %d: want >= 1", c.MaxNumSeqs))
	}
	if c.PrefillTokensPerSec <= 0 {
		errs = append(errs, fmt.Errorf("prefill tokens per sec %v: want > 0", c.PrefillTokensPerSec))
	}
	if c.DecodePerToken < 0 {
		errs = append(errs, fmt.Errorf("decode per token %v: want >= 0", c.DecodePerToken))
	}
	if c.OutputTokens < 1 {
		errs = append(errs, fmt.Errorf("output tokens %d: want >= 1", c.OutputTokens))
	}
	if c.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("block size %d: want >= 1", c.BlockSize))
	}
	if c.KVCapacity < 0 || c.KVHostCapacity < 0 || (c.KVHostCapacity > 0 && c.KVCapacity == 0) {
		errs = append(errs, fmt.Errorf("kv capacity %d, host %d: want >= 0, a host tier only with a device one", c.KVCapacity, c.KVHostCapacity))
	}
	if c.RefuseWhenFull < 0 {
		errs = append(errs, fmt.Errorf("refuse when full %d: want >= 0", c.RefuseWhenFull))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("mock: invalid config: %w", errors.Join(errs...))
	}
	return c, nil
}

// Completion is the record published on <prefix>.done.<worker_id> when a
// request finishes: wire.Completion, which defines its fields.
type Completion = wire.Completion

// Stats counts what a Worker did.
type Stats struct {
	// Accepted counts requests accepted.
	Accepted uint64
	// Refused counts requests refused busy.
	Refused uint64
	// Completed counts requests finished, acknowledged and reported (the
	// count is taken just before the completion record and the first attempt
	// of the acknowledgement; the confirmation follows).
	Completed uint64
	// Cancelled counts accepted requests the helper ended before they
	// finished (cancelled, nobody listening to the response, taken over by
	// another execution, or stopping): their jobs left the engine.
	Cancelled uint64
	// Preempted counts accepted requests handed back for a preemption
	// (counted in Cancelled too).
	Preempted uint64
	// AckFailures counts acknowledgements JetStream did not confirm within
	// their ack wait, or whose connection closed or worker stopped first (the
	// helper's workerkit.Stats.AcksUnconfirmed, plus those of responses):
	// JetStream redelivers their requests unless the acknowledgement took
	// effect after all, so they may complete again (not on this worker within
	// workerkit.FinishedWindow: it acknowledges them without running them).
	AckFailures uint64
}

// Worker is one simulated engine. Build it with [New].
type Worker struct {
	cfg      Config
	log      zerolog.Logger
	helper   *workerkit.Worker
	wake     chan struct{} // cap 1
	quit     chan struct{}
	loopDone chan struct{}

	ackWait time.Duration // bound of a response's end and acknowledgement

	mu    sync.Mutex
	eng   *engine
	stats Stats
	// caches are the ranks' prefix caches (nil without KVCapacity), and
	// cacheStats their counters (prefixcache.go).
	caches     []*prefixCache
	cacheStats CacheStats
	// bat are the ranks' batched engines with Config.Model (batched.go),
	// which then replace eng and caches, and batJobs their jobs by request.
	bat     []batchedRank
	batJobs map[*workerkit.Request]*job
	// streams are the responses of the jobs in the engine whose producers
	// asked for one (stream.go).
	streams map[*job]*stream

	// Ends of responses: finished jobs with a response waiting for an ack
	// goroutine (FIFO), the number of ack goroutines running (at most
	// ackWorkers), a WaitGroup of them (Add only on the simulation
	// goroutine), and the acknowledgements they could not confirm.
	ackMu         sync.Mutex
	ackQ          []ackJob
	ackRunning    int
	ackWG         sync.WaitGroup
	streamAckFail uint64 // guarded by mu
}

// New validates cfg and builds a simulated engine on nc; call Start to run it.
func New(nc *nats.Conn, cfg Config, log zerolog.Logger) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := naming.New(cfg.Prefix); err != nil { // the helper below refuses a bad prefix with its other problems
		return nil, fmt.Errorf("mock: %w", err)
	}
	m := &Worker{
		cfg:      cfg,
		log:      log.With().Str("component", "mockworker").Str("worker_id", cfg.ID).Logger(),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
		eng:      newEngine(cfg),
		streams:  make(map[*job]*stream),
	}
	m.helper, err = workerkit.New(nc, workerkit.Config{
		ID: cfg.ID, Prefix: cfg.Prefix, DPStart: cfg.DPStart, DPSize: cfg.DPSize,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, TotalKVBlocks: cfg.TotalKVBlocks,
		Taints: cfg.Taints, TTL: cfg.TTL, AckWait: cfg.AckWait, MaxActiveRequests: cfg.MaxActiveRequests,
		HeaderForm: cfg.HeaderForm, PlainAcks: cfg.PlainAcks,
		Preempt: cfg.Preempt,
	}, handler{m}, log)
	if err != nil {
		return nil, fmt.Errorf("mock: %w", err)
	}
	m.ackWait = m.helper.Config().AckWait
	if cfg.Model != nil {
		if err := m.newBatched(); err != nil {
			return nil, fmt.Errorf("mock: %w", err)
		}
	}
	if cfg.KVCapacity > 0 {
		for range m.helper.Config().DPSize {
			m.caches = append(m.caches, newPrefixCache(cfg.KVCapacity, cfg.KVHostCapacity))
		}
		if err := m.helper.EnableKVEvents(workerkit.KVConfig{Resync: m.resyncCache}); err != nil {
			return nil, fmt.Errorf("mock: %w", err)
		}
	}
	return m, nil
}

// Helper returns the worker helper, for SetDraining and inspection.
func (m *Worker) Helper() *workerkit.Worker { return m.helper }

// Stats returns the counters so far.
func (m *Worker) Stats() Stats {
	h := m.helper.Stats()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.AckFailures = h.AcksUnconfirmed + m.streamAckFail
	return s
}

// Start starts the simulation and subscribes for work.
func (m *Worker) Start() error {
	go m.loop()
	if err := m.helper.Start(); err != nil {
		close(m.quit)
		<-m.loopDone
		return fmt.Errorf("mock: %w", err)
	}
	return nil
}

// Stop stops taking work, lets the requests inside finish until ctx ends, hands
// back the rest and stops the simulation. The helper waits, until ctx ends,
// for the confirmations of acknowledgements in flight; Stop then waits, until
// ctx ends, for the ends of responses in flight, which go on in the
// background past it, each for at most AckWait or until the connection
// closes.
func (m *Worker) Stop(ctx context.Context) error {
	err := m.helper.Stop(ctx)
	select {
	case <-m.quit:
	default:
		close(m.quit)
	}
	<-m.loopDone
	acked := make(chan struct{})
	go func() { m.ackWG.Wait(); close(acked) }()
	select {
	case <-acked:
	case <-ctx.Done():
	}
	return err
}

// StopWithin is Stop with grace for the requests inside to finish.
func (m *Worker) StopWithin(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return m.Stop(ctx)
}

// Start builds a Worker (New) and starts it.
func Start(nc *nats.Conn, cfg Config, log zerolog.Logger) (*Worker, error) {
	m, err := New(nc, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	return m, nil
}

// Run builds and starts a Worker and stops it when ctx ends, giving it grace to
// finish the requests inside it; it returns the first error.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, grace time.Duration, log zerolog.Logger) error {
	m, err := Start(nc, cfg, log)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return m.StopWithin(grace)
}

// uncached returns the uncached token count of r (see the package doc).
func uncached(r *workerkit.Request) uint64 {
	if v := workerkit.HeaderValue(r.Header, wire.HeaderPrefillTokens); v != "" {
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			return min(n, max(r.ISL, n))
		}
	}
	if r.Compact || workerkit.HeaderValue(r.Header, wire.HeaderCost) != "" { // the compact form always carries the cost
		return r.Cost
	}
	cached, _ := strconv.ParseUint(strings.TrimSpace(workerkit.HeaderValue(r.Header, wire.HeaderCachedTokens)), 10, 64)
	return r.ISL - min(r.ISL, cached)
}

// offer is the helper's Handler: it admits r to the engine and updates the
// reported load before returning, as the helper's seen_seq contract requires.
func (m *Worker) offer(r *workerkit.Request) bool {
	var api *apiRequest
	if a := strings.TrimSpace(workerkit.HeaderValue(r.Header, wire.HeaderAPI)); a != "" && r.Response() != nil {
		api = parseAPI(a, r.Data, r.RequestID, time.Now())
	}
	out := outputTokens(strings.TrimSpace(workerkit.HeaderValue(r.Header, wire.HeaderOutputTokens)), api, m.cfg.OutputTokens)
	j := &job{req: r, id: r.RequestID, rank: r.DPRank, uncached: uncached(r), out: out}
	tokens := r.ISL
	if tokens == 0 {
		tokens = j.uncached
	}
	bs := uint64(m.cfg.BlockSize)
	j.blocks = (tokens + uint64(out) + bs - 1) / bs

	m.mu.Lock()
	if m.bat != nil {
		err := m.offerBatched(time.Now(), r, j)
		if err == nil {
			m.stats.Accepted++
			m.setLoadLocked(j.rank)
			m.openStream(j, api)
		} else {
			m.stats.Refused++
			m.log.Warn().Err(err).Str("request_id", r.RequestID).Msg("refused")
		}
		m.mu.Unlock()
		m.kick()
		return err == nil
	}
	hashes, cached, hasHashes := m.cacheLookup(r)
	if hasHashes {
		j.uncached, j.cached = r.ISL-cached, cached
	}
	ok := m.eng.admit(time.Now(), j)
	if ok && hasHashes {
		m.cacheStore(r, hashes, cached)
	}
	if ok {
		m.stats.Accepted++
		m.setLoadLocked(j.rank)
		m.openStream(j, api)
	} else {
		m.stats.Refused++
	}
	m.mu.Unlock()
	if ok {
		m.kick()
	}
	return ok
}

// setLoadLocked reports rank's load; m.mu must be held.
func (m *Worker) setLoadLocked(rank int) {
	load := m.eng.rank(rank).load
	if m.bat != nil {
		load = m.loadBatched(rank)
	}
	if err := m.helper.SetLoad(rank, load); err != nil {
		m.log.Error().Err(err).Msg("set load")
	}
}

// loop is the simulation goroutine: it applies due events and sleeps until the
// next one or a new arrival.
func (m *Worker) loop() {
	defer close(m.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		m.mu.Lock()
		now := time.Now()
		var (
			done []*job
			next time.Time
			ok   bool
		)
		if m.bat != nil {
			done = m.advanceBatched(now)
		} else {
			done = m.eng.advance(now)
		}
		for i := range m.eng.ranks {
			m.setLoadLocked(m.cfg.DPStart + i)
		}
		var finished []*stream
		for _, j := range done {
			st := m.streams[j]
			finished = append(finished, st) // nil for a job without a response
			delete(m.streams, j)
		}
		if m.bat != nil {
			next, ok = m.nextBatched()
		} else {
			next, ok = m.eng.next()
		}
		if len(m.streams) > 0 {
			next, ok = earlier(next, ok, m.writeTokens(now))
		}
		m.mu.Unlock()
		for i, j := range done {
			m.complete(j, finished[i])
		}
		wait := time.Until(next)
		if ok && m.cfg.PreciseTimers && wait <= spin.Window {
			// The last stretch before an event: yield rather than sleep
			// (package spin), still taking new arrivals and Stop.
			select {
			case <-m.quit:
				return
			case <-m.wake:
			default:
				runtime.Gosched()
			}
			continue
		}
		switch {
		case !ok:
			timer.Stop()
		case m.cfg.PreciseTimers:
			timer.Reset(wait - spin.Window)
		default:
			timer.Reset(wait)
		}
		select {
		case <-m.quit:
			return
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// complete publishes a finished request's record and acknowledges it: the
// record ahead of every attempt of the acknowledgement, confirmed unless
// PlainAcks (workerkit.Request.DoneAfter; the helper retries in the
// background). A job with a response goes to the ack goroutines instead
// (st not nil): its end marker waits for the producer's answer. It runs on
// the simulation goroutine and does not block.
func (m *Worker) complete(j *job, st *stream) {
	if st != nil {
		m.ackMu.Lock()
		m.ackQ = append(m.ackQ, ackJob{j, st})
		spawn := m.ackRunning < ackWorkers
		if spawn {
			m.ackRunning++
			m.ackWG.Add(1)
		}
		m.ackMu.Unlock()
		if spawn {
			go m.ackLoop()
		}
		return
	}
	r := j.req
	c := m.completion(j)
	err := r.DoneAfter(m.afterAck(r, c))
	if err != nil {
		// ErrFinished: handed back at stop, not ours to report.
		m.log.Warn().Err(err).Str("request_id", r.RequestID).Str("class", r.Class).Msg("ack finished request")
		return
	}
	m.log.Debug().Str("request_id", r.RequestID).Msg("request finished")
}

// afterAck is what follows the confirmed acknowledgement of r (attempt 1
// the first): r counts as completed, and its completion record c is
// published unless NoCompletions.
func (m *Worker) afterAck(r *workerkit.Request, c wire.Completion) func(attempt int) {
	return func(attempt int) {
		if attempt == 1 {
			m.mu.Lock()
			m.stats.Completed++
			m.mu.Unlock()
		}
		if m.cfg.NoCompletions {
			return
		}
		if err := r.PublishCompletion(c); err != nil {
			m.log.Error().Err(err).Str("request_id", r.RequestID).Int("attempt", attempt).Msg("publish completion")
		}
	}
}

// ackJob is a finished job with a response waiting for an ack goroutine.
type ackJob struct {
	j  *job
	st *stream
}

// ackLoop ends the responses of queued jobs and acknowledges them, oldest
// first, until the queue is empty. Until an ack goroutine takes a job its
// request stays held by the helper, which keeps sending progress (+WPI)
// for it.
func (m *Worker) ackLoop() {
	defer m.ackWG.Done()
	for {
		m.ackMu.Lock()
		if len(m.ackQ) == 0 {
			m.ackRunning--
			m.ackMu.Unlock()
			return
		}
		a := m.ackQ[0]
		m.ackQ[0] = ackJob{}
		m.ackQ = m.ackQ[1:]
		m.ackMu.Unlock()
		m.finishStream(a.j, a.st, m.completion(a.j))
	}
}

// completion returns j's completion record.
func (m *Worker) completion(j *job) wire.Completion {
	r := j.req
	f := m.cfg.CostFactor
	key := r.FairnessKey
	if key == "" {
		key = "_"
	}
	if kf, ok := m.cfg.KeyCostFactors[key]; ok {
		f = kf
	}
	c := r.Completion(uint64(math.Round(float64(j.uncached)*f)), uint64(j.out), false)
	c.DPRank, c.ReceivedAt, c.StartedAt, c.FinishedAt = j.rank, j.receivedAt, j.startedAt, j.finishAt
	c.FirstTokenAt = j.prefillEnd
	c.CachedTokens = j.cached
	return c
}
