package engineworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/workerkit"
)

// Config describes one engine worker.
type Config struct {
	// Worker is the worker helper's configuration (id, prefix, ranks, TTL...).
	// MaxActiveRequests defaults to MaxNumSeqs, MaxNumBatchedTokens and
	// TotalKVBlocks to what the engine says.
	Worker workerkit.Config
	// Engine is "vllm" or "sglang".
	Engine string
	// EngineURL is the engine's HTTP base URL (http://host:8000).
	EngineURL string
	// MetricsURL is where its metrics are, default EngineURL + "/metrics".
	MetricsURL string
	// MaxNumSeqs is the engine's --max-num-seqs (SGLang: read from
	// /get_server_info when 0); it becomes the ranks' capacity.
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
	// HealthTimeout), checked every HealthInterval. Defaults 500ms, 1s, 2.
	HealthInterval, HealthTimeout time.Duration
	HealthFailures                int
}

func (c Config) withDefaults() (Config, error) {
	if c.Engine != "vllm" && c.Engine != "sglang" {
		return c, fmt.Errorf("engineworker: engine %q: want vllm or sglang", c.Engine)
	}
	if c.EngineURL == "" {
		return c, errors.New("engineworker: engine URL required")
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
	if c.HealthInterval == 0 {
		c.HealthInterval = 500 * time.Millisecond
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = time.Second
	}
	if c.HealthFailures == 0 {
		c.HealthFailures = 2
	}
	if c.Worker.DPSize == 0 {
		c.Worker.DPSize = 1
	}
	return c, nil
}

// errUnhealthy is the cause of a request stopped because its engine failed
// its health check.
var errUnhealthy = errors.New("engineworker: engine unhealthy")

// job is one request at the engine.
type job struct {
	r        *workerkit.Request
	uncached uint64
	prefill  bool // not yet past its first chunk
	chunks   int
	cancel   context.CancelCauseFunc
}

// rankLoad is the worker's own count of one rank and the engine's last word.
type rankLoad struct {
	active, prefillTokens uint64
	foreign               uint64 // the engine's requests beyond ours at the last scrape
	kvUsed                uint64
}

// Worker is an engine worker. Build it with [New], run it with [Worker.Run].
type Worker struct {
	cfg  Config
	log  zerolog.Logger
	wk   *workerkit.Worker
	http *http.Client

	mu       sync.Mutex
	jobs     map[*workerkit.Request]*job
	loads    []rankLoad
	chains   []*Chain // guarded by kvMu
	healthy  bool
	totalKV  uint64
	kvMu     sync.Mutex
	stats    Stats
	runCtx   context.Context
	fallback context.Context
}

// Stats counts what the worker did.
type Stats struct {
	Done, Failed, HandedBack       uint64
	Batches, Replays, Resets, Gaps uint64
	LayoutErrors, UnknownParents   uint64
}

// New builds a worker on the connection nc.
func New(nc *nats.Conn, cfg Config, log zerolog.Logger) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Worker.MaxActiveRequests == 0 {
		cfg.Worker.MaxActiveRequests = cfg.MaxNumSeqs
	}
	w := &Worker{cfg: cfg, log: log.With().Str("component", "engineworker").Logger(),
		http: &http.Client{}, jobs: map[*workerkit.Request]*job{}, healthy: true,
		loads: make([]rankLoad, cfg.Worker.DPSize), fallback: context.Background()}
	for range cfg.Worker.DPSize {
		w.chains = append(w.chains, NewChain(cfg.BlockSize, cfg.KVGroup, 1<<22))
	}
	if w.wk, err = workerkit.New(nc, cfg.Worker, w, log); err != nil {
		return nil, err
	}
	if cfg.KVEndpoint != "" {
		if err := w.wk.EnableKVEvents(workerkit.KVConfig{Resync: w.resync}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Helper returns the worker helper (for its instance and stats).
func (w *Worker) Helper() *workerkit.Worker { return w.wk }

// Stats returns the counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Run starts the worker and runs it until ctx ends, then stops it, handing
// back what it holds.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.runCtx = ctx
	w.mu.Unlock()
	if err := w.wk.Start(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.scrapeLoop(ctx) }()
	go func() { defer wg.Done(); w.healthLoop(ctx) }()
	if w.cfg.KVEndpoint != "" {
		for i := range w.cfg.Worker.DPSize {
			wg.Add(1)
			go func() { defer wg.Done(); w.kvLoop(ctx, i) }()
		}
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := w.wk.Stop(sctx)
	wg.Wait()
	return err
}

// Offer accepts every request in range: the dispatcher never sends a rank
// more than its capacity (max_num_seqs).
func (w *Worker) Offer(r *workerkit.Request) bool {
	w.mu.Lock()
	if !w.healthy {
		w.mu.Unlock()
		return false
	}
	uncached := r.Cost
	if uncached == 0 {
		uncached = r.ISL
	}
	ctx := w.runCtx
	if ctx == nil {
		ctx = w.fallback
	}
	jctx, cancel := context.WithCancelCause(ctx)
	j := &job{r: r, uncached: uncached, prefill: true, cancel: cancel}
	w.jobs[r] = j
	rank := r.DPRank - w.cfg.Worker.DPStart
	w.loads[rank].active++
	w.loads[rank].prefillTokens += uncached
	w.setLoadLocked(rank)
	w.mu.Unlock()
	go w.run(jctx, j)
	return true
}

func (w *Worker) setLoadLocked(rank int) {
	l := w.loads[rank]
	_ = w.wk.SetLoad(w.cfg.Worker.DPStart+rank, workerkit.RankLoad{
		ActiveRequests: l.active + l.foreign, ActivePrefillTokens: l.prefillTokens, KVUsedBlocks: l.kvUsed,
	})
}

// firstChunk moves j past its prefill in the load.
func (w *Worker) firstChunk(j *job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j.chunks++
	if j.prefill {
		j.prefill = false
		rank := j.r.DPRank - w.cfg.Worker.DPStart
		w.loads[rank].prefillTokens -= j.uncached
		w.setLoadLocked(rank)
	}
}

func (w *Worker) run(ctx context.Context, j *job) {
	r := j.r
	rank := -1
	if w.cfg.Worker.DPSize > 1 {
		rank = r.DPRank
	}
	api := workerkit.HeaderValue(r.Header, HeaderAPI)
	u, _, err := Call(ctx, w.http, w.cfg.EngineURL, api, r.Data, rank, func(chunk []byte) error {
		w.firstChunk(j)
		return nil // the response path (Dispatch-Response-To) carries chunks once workerkit has it
	})
	w.mu.Lock()
	delete(w.jobs, r)
	idx := r.DPRank - w.cfg.Worker.DPStart
	w.loads[idx].active--
	if j.prefill {
		w.loads[idx].prefillTokens -= j.uncached
	}
	chunks := j.chunks
	w.setLoadLocked(idx)
	w.mu.Unlock()
	j.cancel(nil)
	var ee *EngineError
	switch {
	case err == nil:
		if cerr := r.DoneConfirmed(context.Background()); cerr != nil {
			w.log.Warn().Err(cerr).Str("request_id", r.RequestID).Msg("ack unconfirmed")
		}
		_ = r.Complete(u.Uncached(), u.CompletionTokens, false)
		w.count(func(s *Stats) { s.Done++ })
	case chunks == 0 && (errors.Is(context.Cause(ctx), errUnhealthy) || !errors.As(err, &ee) || ee.Status >= 500):
		// Nothing reached the caller: another worker runs it.
		_ = r.Nak()
		w.count(func(s *Stats) { s.HandedBack++ })
	default:
		// The engine refused it (4xx) or it broke after its first chunk: it
		// is not run again; the record settles what it used.
		w.log.Warn().Err(err).Str("request_id", r.RequestID).Int("chunks", chunks).Msg("request failed")
		_ = r.Term()
		_ = r.Complete(u.Uncached(), u.CompletionTokens, true)
		w.count(func(s *Stats) { s.Failed++ })
	}
}

func (w *Worker) count(f func(*Stats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// healthLoop checks /health; HealthFailures failures in a row make the
// worker drain (the dispatcher stops sending at once) and stop its
// requests: those without a chunk are handed back, the others end failed.
func (w *Worker) healthLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.HealthInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.checkHealth(ctx) {
			fails = 0
			w.mu.Lock()
			was := w.healthy
			w.healthy = true
			w.mu.Unlock()
			if !was {
				w.log.Info().Msg("engine healthy again")
				w.wk.SetDraining(false)
			}
			continue
		}
		if fails++; fails < w.cfg.HealthFailures {
			continue
		}
		w.mu.Lock()
		was := w.healthy
		w.healthy = false
		var stop []*job
		for _, j := range w.jobs {
			stop = append(stop, j)
		}
		w.mu.Unlock()
		if was {
			w.log.Warn().Int("failures", fails).Msg("engine unhealthy: draining")
			w.wk.SetDraining(true)
		}
		for _, j := range stop {
			j.cancel(errUnhealthy)
		}
	}
}

func (w *Worker) checkHealth(ctx context.Context) bool {
	hctx, cancel := context.WithTimeout(ctx, w.cfg.HealthTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(hctx, http.MethodGet, w.cfg.EngineURL+"/health", nil)
	resp, err := w.http.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// scrapeLoop reads the engine's metrics every ScrapeInterval into the load.
func (w *Worker) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.ScrapeInterval)
	defer t.Stop()
	prefix := "vllm:"
	if w.cfg.Engine == "sglang" {
		prefix = "sglang:"
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, w.cfg.ScrapeInterval*4)
		req, _ := http.NewRequestWithContext(sctx, http.MethodGet, w.cfg.MetricsURL, nil)
		resp, err := w.http.Do(req)
		if err != nil {
			cancel()
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		cancel()
		if err != nil {
			continue
		}
		samples, err := ParseMetrics(b, prefix)
		if err != nil {
			w.log.Warn().Err(err).Msg("engine metrics")
			continue
		}
		loads := LoadsFromMetrics(w.cfg.Engine, samples, w.cfg.Worker.DPStart)
		w.mu.Lock()
		for i := range w.loads {
			l, ok := loads[w.cfg.Worker.DPStart+i]
			if !ok {
				continue
			}
			total := w.cfg.Worker.TotalKVBlocks
			if total == 0 {
				total = l.TotalKVBlocks
			}
			engine := uint64(l.Running + l.Waiting)
			w.loads[i].foreign = 0
			if engine > w.loads[i].active {
				w.loads[i].foreign = engine - w.loads[i].active
			}
			w.loads[i].kvUsed = uint64(l.KVUsage*float64(total) + 0.5)
			w.setLoadLocked(i)
		}
		w.mu.Unlock()
	}
}
