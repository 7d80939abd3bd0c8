package engineworker

// The engine's state, read by the worker: its settings at start
// (SGLang's /get_server_info, python/sglang/srt/entrypoints/http_server.py;
// vLLM's vllm:cache_config_info), its health (GET /health: 200 when alive,
// vllm/entrypoints/openai/api_server.py) and its metrics, scraped into the
// load report.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"
)

// discoverRetry is the pause between attempts to reach the engine at start.
const discoverRetry = time.Second

// discover waits until the engine answers /health and reads what the
// configuration leaves to it: SGLang's max_running_requests,
// chunked_prefill_size and KV capacity from /get_server_info, vLLM's
// num_gpu_blocks from vllm:cache_config_info. An engine loading its model
// keeps the worker waiting, unreported: it takes nothing before the engine
// can run it.
func (w *Worker) discover(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := w.discoverOnce(ctx)
		if err == nil {
			return nil
		}
		if attempt%30 == 0 {
			w.log.Info().Err(err).Msg("waiting for the engine")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("engineworker: the engine never answered: %w", err)
		case <-time.After(discoverRetry):
		}
	}
}

func (w *Worker) discoverOnce(ctx context.Context) error {
	if ok, err := w.checkHealth(ctx); !ok {
		if err == nil {
			err = errors.New("/health did not answer 200")
		}
		return err
	}
	w.mu.Lock()
	cfg := w.cfg
	w.mu.Unlock()
	switch cfg.Engine {
	case "sglang":
		info, err := w.serverInfo(ctx)
		if err != nil {
			if cfg.MaxNumSeqs == 0 {
				return fmt.Errorf("/get_server_info (needed without --max-num-seqs): %w", err)
			}
			w.log.Warn().Err(err).Msg("/get_server_info")
			break
		}
		if cfg.Worker.MaxActiveRequests == 0 && info.MaxRunningRequests > 0 {
			cfg.MaxNumSeqs = uint64(info.MaxRunningRequests)
			cfg.Worker.MaxActiveRequests = cfg.MaxNumSeqs
		}
		if cfg.Worker.MaxNumBatchedTokens == 0 && info.ChunkedPrefillSize > 0 {
			cfg.Worker.MaxNumBatchedTokens = uint64(info.ChunkedPrefillSize)
		}
		if info.MaxTotalNumTokens > 0 {
			w.totalKV = uint64(info.MaxTotalNumTokens) / uint64(cfg.BlockSize)
		}
		if cfg.Worker.MaxActiveRequests == 0 {
			return errors.New("/get_server_info has no max_running_requests: give --max-num-seqs")
		}
	case "vllm":
		samples, err := w.scrape(ctx)
		if err != nil {
			w.log.Warn().Err(err).Msg("engine metrics at start")
			break
		}
		for _, l := range LoadsFromMetrics(cfg.Engine, samples, cfg.Worker.DPStart) {
			if l.TotalKVBlocks > 0 {
				w.totalKV = l.TotalKVBlocks
			}
		}
	}
	if cfg.Worker.TotalKVBlocks == 0 {
		cfg.Worker.TotalKVBlocks = w.totalKV
	}
	w.mu.Lock()
	w.cfg = cfg
	w.mu.Unlock()
	w.log.Info().Uint64("max_num_seqs", cfg.Worker.MaxActiveRequests).Uint64("max_num_batched_tokens", cfg.Worker.MaxNumBatchedTokens).
		Uint64("total_kv_blocks", cfg.Worker.TotalKVBlocks).Msg("engine settings")
	return nil
}

// ServerInfo is what the worker reads of SGLang's /get_server_info: the
// server arguments at the top level and the scheduler's KV capacity.
type ServerInfo struct {
	MaxRunningRequests int `json:"max_running_requests"`
	ChunkedPrefillSize int `json:"chunked_prefill_size"`
	MaxTotalNumTokens  int `json:"max_total_num_tokens"`
	PageSize           int `json:"page_size"`
	DPSize             int `json:"dp_size"`
}

func (w *Worker) serverInfo(ctx context.Context) (ServerInfo, error) {
	var info ServerInfo
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, path := range []string{"/get_server_info", "/server_info"} {
		req, _ := http.NewRequestWithContext(hctx, http.MethodGet, w.cfg.EngineURL+path, nil)
		resp, err := w.http.Do(req)
		if err != nil {
			return info, err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			continue // newer SGLang: /server_info
		}
		if err != nil {
			return info, err
		}
		if resp.StatusCode != http.StatusOK {
			return info, &EngineError{Status: resp.StatusCode, Body: b}
		}
		return info, json.Unmarshal(b, &info)
	}
	return info, errors.New("neither /get_server_info nor /server_info found")
}

// healthLoop checks /health every HealthInterval. HealthFailures failures
// in a row make the worker drain (the dispatcher stops sending at its next
// report, sent at once) and stop its requests: those whose producer has
// seen no chunk are handed back, the others end failed. A check refused
// because nothing listens (the engine process is gone, and its cache with
// it) also clears the KV index of every rank at once.
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
		ok, err := w.checkHealth(ctx)
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		wasDown := w.engineDown
		w.engineDown = errors.Is(err, syscall.ECONNREFUSED)
		down := w.engineDown && !wasDown
		w.mu.Unlock()
		if down {
			w.log.Warn().Msg("nothing listens at the engine's address: its cache is gone")
			for _, g := range w.gone {
				select {
				case g <- struct{}{}:
				default:
				}
			}
		}
		if ok {
			fails = 0
			w.mu.Lock()
			was := w.healthy
			w.healthy = true
			w.mu.Unlock()
			if !was {
				w.log.Info().Msg("engine healthy again")
				w.updateDraining()
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
		if was {
			w.stats.Unhealthy++
		}
		w.mu.Unlock()
		if was {
			w.log.Warn().Err(err).Int("failures", fails).Int("running", len(stop)).Msg("engine unhealthy: draining")
			w.updateDraining()
		}
		for _, j := range stop {
			j.cancel(errUnhealthy)
		}
	}
}

// checkHealth asks /health once, within HealthTimeout.
func (w *Worker) checkHealth(ctx context.Context) (bool, error) {
	hctx, cancel := context.WithTimeout(ctx, w.cfg.HealthTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(hctx, http.MethodGet, w.cfg.EngineURL+"/health", nil)
	resp, err := w.http.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("/health answered %d", resp.StatusCode)
	}
	return true, nil
}

// scrape reads the engine's metrics once.
func (w *Worker) scrape(ctx context.Context) ([]Sample, error) {
	sctx, cancel := context.WithTimeout(ctx, max(w.cfg.ScrapeInterval*4, time.Second))
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, w.cfg.MetricsURL, nil)
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &EngineError{Status: resp.StatusCode, Body: b[:min(len(b), 512)]}
	}
	prefix := "vllm:"
	if w.cfg.Engine == "sglang" {
		prefix = "sglang:"
	}
	return ParseMetrics(b, prefix)
}

// scrapeLoop reads the engine's metrics every ScrapeInterval into the load:
// the engine's requests beyond the worker's own (another client's, or ours
// the engine still counts), and its KV cache usage in blocks. A failed
// scrape keeps the last values.
func (w *Worker) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		samples, err := w.scrape(ctx)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug().Err(err).Msg("engine metrics")
			}
			continue
		}
		w.applyMetrics(LoadsFromMetrics(w.cfg.Engine, samples, w.cfg.Worker.DPStart))
	}
}

// applyMetrics puts one scrape's loads into the ranks' reports.
func (w *Worker) applyMetrics(loads map[int]EngineLoad) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Scrapes++
	for i := range w.loads {
		l, ok := loads[w.cfg.Worker.DPStart+i]
		if !ok {
			continue
		}
		total := w.cfg.Worker.TotalKVBlocks
		if total == 0 {
			total = max(l.TotalKVBlocks, w.totalKV)
		}
		engine := uint64(l.Running + l.Waiting)
		w.loads[i].foreign = 0
		if engine > w.loads[i].active {
			w.loads[i].foreign = engine - w.loads[i].active
		}
		w.loads[i].kvUsed = uint64(l.KVUsage*float64(total) + 0.5)
		w.setLoadLocked(i)
	}
}
