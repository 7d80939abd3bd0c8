package engineworker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/naming"
	"fairdispatch/workerkit"
)

// Config describes one engine worker.
type Config struct {
	// Worker is the worker helper's configuration (id, prefix, ranks, TTL...).
	// MaxActiveRequests defaults to MaxNumSeqs, MaxNumBatchedTokens and
	// TotalKVBlocks to what the engine says (SGLang's /get_server_info,
	// vLLM's vllm:cache_config_info).
	Worker workerkit.Config
	// Engine is "vllm" or "sglang".
	Engine string
	// EngineURL is the engine's HTTP base URL (http://host:8000).
	EngineURL string
	// MetricsURL is where its metrics are, default EngineURL + "/metrics".
	MetricsURL string
	// MaxNumSeqs is the engine's --max-num-seqs (SGLang's
	// --max-running-requests); it becomes the ranks' capacity. Required for
	// vLLM, which does not expose it; for SGLang 0 reads max_running_requests
	// from /get_server_info.
	MaxNumSeqs uint64
	// BlockSize is our block size in tokens (docs/protocol.md, Block hashes), default 16.
	BlockSize int
	// KVEndpoint is the engine's ZMQ PUB endpoint for rank 0 ("" no KV events);
	// rank r is at its port + r.
	KVEndpoint string
	// ReplayEndpoint is the engine's replay ROUTER endpoint for rank 0, "" none.
	ReplayEndpoint string
	// KVTopic is the engine's KV event topic.
	KVTopic string
	// KVGroup is the KV cache group whose events count (hybrid models), default 0.
	KVGroup int
	// ScrapeInterval is the metrics period, default 250ms.
	ScrapeInterval time.Duration
	// HealthInterval, HealthTimeout and HealthFailures: the engine is unhealthy
	// after HealthFailures checks in a row fail (or take longer than
	// HealthTimeout), checked every HealthInterval. Defaults 500ms, 1s, 2 for
	// vLLM, whose /health answers at once; 2s, 5s, 2 for SGLang, whose /health
	// runs a one-token request and answers after a second at the soonest
	// (python/sglang/srt/entrypoints/http_server.py, health_generate).
	HealthInterval, HealthTimeout time.Duration
	HealthFailures                int
	// StopGrace is how long Run lets running requests finish once its
	// context ends, default 8s; those still running are then handed back
	// (before their first chunk) or end failed.
	StopGrace time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Engine != "vllm" && c.Engine != "sglang" {
		return c, fmt.Errorf("engineworker: engine %q: want vllm or sglang", c.Engine)
	}
	if c.EngineURL == "" {
		return c, errors.New("engineworker: engine URL required")
	}
	if c.Engine == "vllm" && c.MaxNumSeqs == 0 {
		return c, errors.New("engineworker: max_num_seqs required for vLLM (its --max-num-seqs; the engine does not expose it)")
	}
	if c.MetricsURL == "" {
		c.MetricsURL = c.EngineURL + "/metrics"
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = 250 * time.Millisecond
	}
	interval, timeout := 500*time.Millisecond, time.Second
	if c.Engine == "sglang" {
		interval, timeout = 2*time.Second, 5*time.Second
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = interval
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = timeout
	}
	if c.HealthFailures == 0 {
		c.HealthFailures = 2
	}
	if c.StopGrace == 0 {
		c.StopGrace = 8 * time.Second
	}
	if c.Worker.DPSize == 0 {
		c.Worker.DPSize = 1
	}
	return c, nil
}

// HealthPeriod returns the longest time from an engine hanging to the
// worker reporting it: one interval until the next check, then
// HealthFailures checks that each time out.
func (c Config) HealthPeriod() time.Duration {
	return c.HealthInterval + time.Duration(c.HealthFailures)*c.HealthTimeout
}

// Causes of a request stopped by the worker itself.
var (
	// errUnhealthy: the engine failed its health checks.
	errUnhealthy = errors.New("engineworker: engine unhealthy")
	// errShutdown: Run returned with the request still running.
	errShutdown = errors.New("engineworker: worker stopped")
)

// rankLoad is the worker's own count of one rank and the engine's last word.
type rankLoad struct {
	active, prefillTokens uint64
	foreign               uint64 // the engine's requests beyond ours at the last scrape
	kvUsed                uint64
}

// Worker is an engine worker. Build it with [New], run it with [Worker.Run].
type Worker struct {
	cfg Config
	log zerolog.Logger
	// helperLog is the logger handed to the helper, which adds its own
	// component and worker_id: the same keys twice make a JSON line some
	// parsers refuse.
	helperLog zerolog.Logger
	nc        *nats.Conn
	http      *http.Client
	done      string // <prefix>.done.<id>

	// base is every request's parent context, cancelled when Run returns.
	base     context.Context
	stopJobs context.CancelCauseFunc
	running  sync.WaitGroup // the requests' goroutines (run): Run returns after them
	ready    chan struct{}  // closed once the helper started

	mu         sync.Mutex
	wk         *workerkit.Worker
	jobs       map[*workerkit.Request]*job
	loads      []rankLoad
	healthy    bool
	drain      bool // SetDraining
	engineDown bool // the last health check found no engine listening
	totalKV    uint64
	stats      Stats

	kvMu   sync.Mutex // the chains and the helper's Cache calls
	kv     cacheSink  // the helper, set by Run before the KV loops start
	chains []*Chain
	gone   []chan struct{} // per rank: the engine process went away
}

// Stats counts what the worker did.
type Stats struct {
	// Done, Failed, HandedBack and Cancelled count requests: answered,
	// ended failed, handed back before their first chunk, ended by the
	// helper (cancelled, nobody listening, taken, stopped).
	Done, Failed, HandedBack, Cancelled uint64
	// Aborted counts engine requests stopped before the engine finished
	// them (their HTTP stream closed).
	Aborted uint64
	// Unhealthy counts the times the engine was found unhealthy.
	Unhealthy                      uint64
	Batches, Replays, Resets, Gaps uint64
	LayoutErrors, UnknownParents   uint64
	// Collisions counts stored blocks the chain held under another parent
	// (ErrCollision): an engine whose hashes do not chain its prefix.
	Collisions uint64
	// Scrapes counts the metrics read.
	Scrapes uint64
}

// New checks cfg and builds a worker on the connection nc. Nothing runs
// before [Worker.Run].
func New(nc *nats.Conn, cfg Config, log zerolog.Logger) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Worker.MaxActiveRequests == 0 {
		cfg.Worker.MaxActiveRequests = cfg.MaxNumSeqs
	}
	// The helper checks its configuration now, so that a bad flag fails at
	// once; Run builds the one that runs, with what the engine says.
	probe := cfg.Worker
	if probe.MaxActiveRequests == 0 {
		probe.MaxActiveRequests = 1
	}
	if _, err := workerkit.New(nc, probe, workerkit.HandlerFunc(func(*workerkit.Request) bool { return false }), log); err != nil {
		return nil, err
	}
	names, err := naming.New(probe.Prefix)
	if probe.Prefix == "" {
		names, err = naming.New(workerkit.DefaultPrefix)
	}
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, log: log.With().Str("component", "engineworker").Str("worker_id", cfg.Worker.ID).Logger(), helperLog: log,
		nc: nc, done: names.Done(cfg.Worker.ID), ready: make(chan struct{}),
		http: &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second,
		}},
		jobs: map[*workerkit.Request]*job{}, healthy: true, loads: make([]rankLoad, cfg.Worker.DPSize)}
	w.base, w.stopJobs = context.WithCancelCause(context.Background())
	for range cfg.Worker.DPSize {
		w.chains = append(w.chains, NewChain(cfg.BlockSize, cfg.KVGroup, 1<<22))
		w.gone = append(w.gone, make(chan struct{}, 1))
	}
	return w, nil
}

// Config returns the configuration with defaults applied and, once
// [Worker.Ready], what the engine said.
func (w *Worker) Config() Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg
}

// Ready is closed once Run has learnt the engine's settings and started
// the helper: the worker then reports and takes requests.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Helper returns the worker helper, nil before [Worker.Ready].
func (w *Worker) Helper() *workerkit.Worker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wk
}

// Stats returns the counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// SetDraining makes the worker report draining (it takes no new requests,
// its running ones finish) or not; an unhealthy engine drains it too.
func (w *Worker) SetDraining(on bool) {
	w.mu.Lock()
	w.drain = on
	w.mu.Unlock()
	w.updateDraining()
}

// updateDraining tells the helper whether the worker drains now.
func (w *Worker) updateDraining() {
	w.mu.Lock()
	wk, draining := w.wk, w.drain || !w.healthy
	w.mu.Unlock()
	if wk != nil {
		wk.SetDraining(draining)
	}
}

// Run waits for the engine and learns its settings, starts the worker and
// runs it until ctx ends. It then stops taking requests, lets the running
// ones finish for StopGrace and hands back, or ends failed, those still
// running (docs/protocol.md, What a worker does with each answer).
func (w *Worker) Run(ctx context.Context) error {
	defer w.stopJobs(errShutdown)
	if err := w.discover(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	cfg := w.cfg
	w.mu.Unlock()
	wk, err := workerkit.New(w.nc, cfg.Worker, w, w.helperLog)
	if err != nil {
		return err
	}
	if cfg.KVEndpoint != "" {
		if err := wk.EnableKVEvents(workerkit.KVConfig{Resync: w.resync}); err != nil {
			return err
		}
	}
	w.kv = wk
	w.mu.Lock()
	w.wk = wk
	draining := w.drain || !w.healthy
	w.mu.Unlock()
	wk.SetDraining(draining)
	if err := wk.Start(); err != nil {
		return err
	}
	close(w.ready)
	lctx, stopLoops := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.scrapeLoop(lctx) }()
	go func() { defer wg.Done(); w.healthLoop(lctx) }()
	if cfg.KVEndpoint != "" {
		for i := range cfg.Worker.DPSize {
			wg.Add(1)
			go func() { defer wg.Done(); w.kvLoop(lctx, i) }()
		}
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopGrace)
	defer cancel()
	err = wk.Stop(sctx)
	stopLoops()
	wg.Wait()
	// What is still running ends now: its end marker or acknowledgement
	// (each bounded by endTimeout) goes out before Run returns and the
	// caller closes the connection.
	w.stopJobs(errShutdown)
	w.running.Wait()
	return err
}

// Offer accepts every request in range while the engine is healthy and the
// worker not draining: the dispatcher never sends a rank more than its
// capacity (max_num_seqs).
func (w *Worker) Offer(r *workerkit.Request) bool {
	w.mu.Lock()
	if !w.healthy || w.drain {
		w.mu.Unlock()
		return false
	}
	uncached := r.Cost
	if uncached == 0 {
		uncached = r.ISL
	}
	jctx, cancel := context.WithCancelCause(w.base)
	rank := r.DPRank - w.cfg.Worker.DPStart
	j := &job{r: r, resp: r.Response(), rank: rank, uncached: uncached, prefill: true, cancel: cancel}
	w.jobs[r] = j
	w.loads[rank].active++
	w.loads[rank].prefillTokens += uncached
	w.setLoadLocked(rank)
	w.running.Add(1)
	w.mu.Unlock()
	go func() { defer w.running.Done(); w.run(jctx, j) }()
	return true
}

// Cancelled stops the engine request of r, which the helper ended on its
// own (cancelled, nobody listening, taken over, or stopped): closing its
// HTTP stream aborts it in the engine.
func (w *Worker) Cancelled(r *workerkit.Request, cause error) {
	w.mu.Lock()
	j := w.jobs[r]
	w.mu.Unlock()
	if j != nil {
		j.cancel(cause)
	}
}

// setLoadLocked tells the helper rank's load; w.mu is held.
func (w *Worker) setLoadLocked(rank int) {
	if w.wk == nil {
		return
	}
	l := w.loads[rank]
	_ = w.wk.SetLoad(w.cfg.Worker.DPStart+rank, workerkit.RankLoad{
		ActiveRequests: l.active + l.foreign, ActivePrefillTokens: l.prefillTokens, KVUsedBlocks: l.kvUsed,
	})
}

func (w *Worker) count(f func(*Stats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}
