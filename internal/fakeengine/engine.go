package fakeengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Config describes a fake engine. Zero fields get the defaults of [New].
type Config struct {
	// Kind is "vllm" (default) or "sglang": the metric names, /get_server_info
	// and the usage details follow that engine.
	Kind string
	// Model is the served model name, default "fake-model".
	Model string
	// BlockSize is the engine's KV block size in tokens, default 16.
	BlockSize int
	// NumGPUBlocks is the prefix cache's capacity in blocks, default 4096.
	NumGPUBlocks int
	// MaxNumSeqs bounds the running requests, default 8.
	MaxNumSeqs int
	// MaxNumBatchedTokens is only reported (SGLang's chunked_prefill_size), default 8192.
	MaxNumBatchedTokens int
	// PrefillTokensPerSec is the prefill speed, default 200000.
	PrefillTokensPerSec float64
	// DecodePerToken is the time of one output token, default 1ms.
	DecodePerToken time.Duration
	// DPRank is the data-parallel rank this engine is (its events carry it).
	DPRank int
	// KVEndpoint is the ZMQ PUB endpoint (tcp://127.0.0.1:port); "" publishes no events.
	KVEndpoint string
	// ReplayEndpoint is the ZMQ ROUTER endpoint for replays; "" has none.
	ReplayEndpoint string
	// Topic is the ZMQ topic, default "" (vLLM's default).
	Topic string
	// Layout is one of Layouts, default LayoutMedium.
	Layout string
	// ReplayWithTopic answers replays with the topic frame first (newer vLLM).
	ReplayWithTopic bool
	// ByteHashes sends block hashes as sha256 bytes instead of their low 64
	// bits as ints, vLLM's default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1,
	// vllm/envs.py; 0 sends the bytes).
	ByteHashes bool
	// PromptTokensDetails reports cached tokens in usage (vLLM's
	// --enable-prompt-tokens-details, SGLang's --enable-cache-report).
	PromptTokensDetails bool
	// ReplayBuffer is how many batches the replay keeps, default 10000 (buffer_steps).
	ReplayBuffer int
	// HealthDelay is how long /health takes to answer: default 0 for vLLM,
	// whose /health answers at once, and 1s for SGLang, whose /health sends
	// a one-token request and checks for an answer after asyncio.sleep(1)
	// (python/sglang/srt/entrypoints/http_server.py, health_generate); a
	// negative value is 0.
	HealthDelay time.Duration
	// ChatTokenizer, when set, gives the token ids of a chat instead of the
	// toy tokenizer (TokenizeChat): a model's chat template and
	// tokenizer.json, as vLLM applies them (vllm/entrypoints/chat_utils.py),
	// so that a test can hold a producer's tokenizer to the engine's ids.
	ChatTokenizer func(msgs []Message, addGenerationPrompt bool) ([]uint32, error)
}

// DefaultConfig returns the configuration a zero Config gets from New: what
// each field's documentation names as its default.
func DefaultConfig() Config {
	c, _ := Config{}.withDefaults() // the zero Config is valid
	return c
}

func (c Config) withDefaults() (Config, error) {
	if c.Kind == "" {
		c.Kind = "vllm"
	}
	if c.Kind != "vllm" && c.Kind != "sglang" {
		return c, fmt.Errorf("fakeengine: kind %q: want vllm or sglang", c.Kind)
	}
	switch {
	case c.HealthDelay < 0:
		c.HealthDelay = 0
	case c.HealthDelay == 0 && c.Kind == "sglang":
		c.HealthDelay = time.Second
	}
	if c.Model == "" {
		c.Model = "fake-model"
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.NumGPUBlocks == 0 {
		c.NumGPUBlocks = 4096
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 8
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = 8192
	}
	if c.PrefillTokensPerSec == 0 {
		c.PrefillTokensPerSec = 200000
	}
	if c.DecodePerToken == 0 {
		c.DecodePerToken = time.Millisecond
	}
	if c.Layout == "" {
		c.Layout = LayoutMedium
	}
	if c.ReplayBuffer == 0 {
		c.ReplayBuffer = 10000
	}
	ok := false
	for _, l := range Layouts {
		ok = ok || l == c.Layout
	}
	if !ok {
		return c, fmt.Errorf("fakeengine: layout %q: want one of %v", c.Layout, Layouts)
	}
	return c, nil
}

// Stats are the engine's counters since it started.
type Stats struct {
	Requests     uint64
	PromptTokens uint64
	CachedTokens uint64 // prompt tokens found in the prefix cache
	OutputTokens uint64
	Running      int
	Waiting      int
	CachedBlocks int
	// UsedBlocks are the blocks of running requests (the usage metrics').
	UsedBlocks    int
	BatchesPublic uint64 // KV event batches published (or dropped on purpose)
	// Aborted counts requests whose client closed the connection before
	// their end (vLLM aborts them: serving_chat.py, the disconnect check).
	Aborted uint64
	// Scrapes counts the /metrics answers served.
	Scrapes uint64
}

// Engine is a fake engine. Build it with [New].
type Engine struct {
	cfg Config
	pub *publisher

	mu      sync.Mutex
	cache   *prefixCache
	running int
	waiting []chan struct{} // FIFO; closed when a slot is given
	stats   Stats
	hung    chan struct{} // non-nil while hung; closed on unhang
	gen     uint64        // restarts, to tell requests of an earlier life
	// inUse counts the blocks of running requests: what vLLM's
	// kv_cache_usage_perc counts (vllm/v1/core/block_pool.py get_usage: 1 -
	// free / total, a cached block no request holds being free) and
	// SGLang's token_usage likewise (evictable tokens are not used).
	inUse int
}

// New starts a fake engine's event publisher (when configured). Serve its
// HTTP API with [Engine.Handler]; stop it with Close.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, cache: newPrefixCache(cfg.NumGPUBlocks)}
	if cfg.KVEndpoint != "" {
		if e.pub, err = newPublisher(ctx, cfg.KVEndpoint, cfg.ReplayEndpoint, cfg.Topic, cfg.ReplayWithTopic, cfg.ReplayBuffer); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Config returns the configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Close stops the publisher.
func (e *Engine) Close() {
	e.Hang(false)
	if e.pub != nil {
		e.pub.close()
	}
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Running, s.Waiting, s.CachedBlocks, s.UsedBlocks = e.running, len(e.waiting), e.cache.len(), e.inUse
	return s
}

// Hang makes every HTTP request (health and metrics included) wait without
// an answer while on, and stops the running requests' streams between two
// tokens, as a stuck engine process does; off releases them.
func (e *Engine) Hang(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case on && e.hung == nil:
		e.hung = make(chan struct{})
	case !on && e.hung != nil:
		close(e.hung)
		e.hung = nil
	}
}

func (e *Engine) hangCh() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hung
}

// Restart empties the cache and starts the event sequence again at 0, as a
// restarted engine process does; with announce it first publishes
// AllBlocksCleared (vLLM's reset_prefix_cache) in the old sequence.
func (e *Engine) Restart(announce bool) {
	e.mu.Lock()
	e.cache.clear()
	e.gen++
	e.mu.Unlock()
	if e.pub == nil {
		return
	}
	if announce {
		e.publish([]kvEvent{{kind: "AllBlocksCleared"}})
	}
	e.pub.restart()
}

// DropEvents leaves the next n batches unpublished (they stay in the replay buffer).
func (e *Engine) DropEvents(n int) {
	if e.pub == nil {
		return
	}
	e.pub.mu.Lock()
	e.pub.drop += n
	e.pub.mu.Unlock()
}

func (e *Engine) publish(evs []kvEvent) {
	if e.pub == nil || len(evs) == 0 {
		return
	}
	b := encodeBatch(e.cfg.Layout, float64(time.Now().UnixNano())/1e9, e.cfg.DPRank, evs, !e.cfg.ByteHashes)
	e.pub.publish(b)
	e.mu.Lock()
	e.stats.BatchesPublic++
	e.mu.Unlock()
}

// run is one request's life: wait for a slot, look up and store its
// blocks, prefill, then emit out tokens through emit (called once per
// token, from the request's goroutine). It returns the cached tokens.
func (e *Engine) run(ctx context.Context, tokens []uint32, out int, emit func(i int) error) (cached int, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			e.mu.Lock()
			e.stats.Aborted++
			e.mu.Unlock()
		}
	}()
	e.mu.Lock()
	e.stats.Requests++
	var slot chan struct{}
	if e.running >= e.cfg.MaxNumSeqs {
		slot = make(chan struct{})
		e.waiting = append(e.waiting, slot)
	} else {
		e.running++
	}
	e.mu.Unlock()
	if slot != nil {
		select {
		case <-slot:
		case <-ctx.Done():
			e.mu.Lock()
			for i, s := range e.waiting {
				if s == slot {
					e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
					e.mu.Unlock()
					return 0, ctx.Err()
				}
			}
			e.mu.Unlock() // the slot was given meanwhile
		}
	}
	defer e.release()

	keys := chain(tokens, e.cfg.BlockSize)
	held := (len(tokens) + e.cfg.BlockSize - 1) / e.cfg.BlockSize // the prompt's blocks; the output's are not modelled
	e.mu.Lock()
	e.inUse += held
	defer func() {
		e.mu.Lock()
		e.inUse -= held
		e.mu.Unlock()
	}()
	hit := e.cache.hits(keys)
	evicted := e.cache.insert(keys, hit)
	cached = hit * e.cfg.BlockSize
	e.stats.PromptTokens += uint64(len(tokens))
	e.stats.CachedTokens += uint64(cached)
	e.mu.Unlock()
	var evs []kvEvent
	if hit < len(keys) {
		ev := kvEvent{kind: "BlockStored", hashes: keys[hit:], blockSize: e.cfg.BlockSize,
			tokens: tokens[hit*e.cfg.BlockSize : len(keys)*e.cfg.BlockSize]}
		if hit > 0 {
			p := keys[hit-1]
			ev.parent = &p
		}
		evs = append(evs, ev)
	}
	if len(evicted) > 0 {
		evs = append(evs, kvEvent{kind: "BlockRemoved", hashes: evicted})
	}
	e.publish(evs)

	prefill := time.Duration(float64(len(tokens)-cached) / e.cfg.PrefillTokensPerSec * float64(time.Second))
	if err := sleep(ctx, prefill); err != nil {
		return cached, err
	}
	for i := range out {
		if i > 0 {
			if err := sleep(ctx, e.cfg.DecodePerToken); err != nil {
				return cached, err
			}
		}
		if h := e.hangCh(); h != nil {
			select {
			case <-h:
			case <-ctx.Done():
				return cached, errNoTime
			}
		}
		if err := emit(i); err != nil {
			return cached, err
		}
		e.mu.Lock()
		e.stats.OutputTokens++
		e.mu.Unlock()
	}
	return cached, nil
}

func (e *Engine) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.waiting) > 0 {
		close(e.waiting[0])
		e.waiting = e.waiting[1:]
		return
	}
	e.running--
}

var errNoTime = errors.New("fakeengine: cancelled")

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errNoTime
	}
}
