package batching

import (
	"fmt"
	"slices"
	"time"
)

// Request is one request given to an engine.
type Request struct {
	// ID names the request in events.
	ID string
	// ISL is the prompt's length in tokens, >= 1.
	ISL int
	// Output is the number of tokens to generate, >= 1.
	Output int
	// Hashes are the chained hashes of the prompt's full blocks of
	// BlockSize tokens (docs/protocol.md, Block hashes), at most
	// ISL/BlockSize of them; nil: nothing is cacheable.
	Hashes []uint64
	// Tag is the caller's, returned in events.
	Tag any
}

// Seq is a request inside an engine: its timings and what the cache gave it.
// Its fields are read-only for callers.
type Seq struct {
	Req *Request
	// Arrived is when Add took it, Started when it was scheduled (its blocks
	// allocated), FirstToken when its prefill completed (the end of the step
	// that computed its last prompt token), Finished when its last output
	// token was generated.
	Arrived, Started, FirstToken, Finished time.Time
	// CachedTokens is the prompt tokens found in the prefix cache when it was
	// scheduled (at most ISL-1: the last prompt token is always computed),
	// and PrefillTokens the prompt tokens it computed (ISL - CachedTokens).
	CachedTokens, PrefillTokens int
	// Generated counts the output tokens so far.
	Generated int

	estimate  int // uncached tokens estimated at arrival (for the load while waiting)
	prefilled int // prompt tokens in the KV cache (cached + computed)
	held      []*block
	private   int
	total     int // blocks of prompt and output
}

func (s *Seq) decoding() bool { return s.prefilled == s.Req.ISL }

// EventKind says what happened to a sequence.
type EventKind uint8

// The events of Advance.
const (
	// FirstToken: the sequence's prefill completed and its first output
	// token came out.
	FirstToken EventKind = iota + 1
	// Finished: the sequence generated its last token and left the engine.
	Finished
)

// Event is one thing that happened, at At.
type Event struct {
	Kind EventKind
	At   time.Time
	Seq  *Seq
}

// chunk is a prefill chunk of the step in progress.
type chunk struct {
	s *Seq
	n int
}

// Load is an engine's load, as a load report states it (docs/protocol.md,
// Load report).
type Load struct {
	// ActivePrefillTokens: uncached prompt tokens not yet computed, of the
	// requests waiting (estimated at arrival) and running.
	ActivePrefillTokens uint64
	// ActiveDecodeBlocks: the blocks of the decoding sequences.
	ActiveDecodeBlocks uint64
	// KVUsedBlocks: the blocks held by running sequences.
	KVUsedBlocks uint64
	// ActiveRequests: waiting and running.
	ActiveRequests uint64
}

// Engine is one continuously batched engine (one data-parallel rank): a FIFO
// waiting queue, running sequences, a KV block pool that is also its prefix
// cache, and steps. Build it with New.
//
// Each step, in this order: waiting requests are scheduled first come first
// served while a sequence slot is free and the pool can hold every block of
// the prompt and the output (so a running sequence is never preempted, as
// TensorRT-LLM's GUARANTEED_NO_EVICT scheduler admits); every decoding
// sequence takes one token of the budget; prefilling sequences take chunks of
// the rest, in scheduling order (chunked prefill). The step lasts
// Model.StepTime of its prefill work and its decoding sequences' context.
// At its end every decoding sequence has one more token, and a sequence whose
// last prompt token was computed has its first. Requests that arrive during
// a step join at the next one.
//
// An Engine is not safe for concurrent use. Costs: Add O(1) amortised plus
// the prefix lookup; Advance O(steps × running); Next O(running) plus
// O(steps) to the next event.
type Engine struct {
	m     Model
	pool  *pool
	block int

	waiting []*Seq
	running []*Seq

	busy      bool
	stepEnd   time.Time
	decodes   []*Seq
	chunks    []chunk
	context   int  // context tokens of this step's decodes
	observe   bool // this step ends a prefill or a sequence
	finishing int  // decodes of this step that finish at its end

	events, spare []Event // pending events, and the slice the last Advance returned
	steps         uint64
	busyTime      time.Duration // sum of the steps' durations
}

// New returns an idle engine with model m (validated) telling obs (may be
// nil) of its cache's changes.
func New(m Model, obs CacheObserver) (*Engine, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &Engine{m: m, pool: newPool(m.KVBlocks, obs), block: m.BlockSize}, nil
}

// Model returns the engine's model.
func (e *Engine) Model() Model { return e.m }

// Add gives the engine r at now (after advancing it to now) and returns its
// sequence. r.Hashes beyond ISL/BlockSize are ignored.
func (e *Engine) Add(now time.Time, r *Request) (*Seq, error) {
	if r.ISL < 1 || r.Output < 1 {
		return nil, fmt.Errorf("batching: request %q: isl %d, output %d: want >= 1", r.ID, r.ISL, r.Output)
	}
	if max := r.ISL / e.block; len(r.Hashes) > max {
		r.Hashes = r.Hashes[:max]
	}
	e.advance(now)
	s := &Seq{Req: r, Arrived: now}
	s.total = (r.ISL + r.Output + e.block - 1) / e.block
	s.private = s.total - len(r.Hashes)
	s.estimate = r.ISL - e.cachedTokens(r, e.pool.prefix(r.Hashes))
	e.waiting = append(e.waiting, s)
	if !e.busy {
		e.start(now)
	}
	return s, nil
}

// cachedTokens is the prompt tokens n cached blocks give r.
func (e *Engine) cachedTokens(r *Request, n int) int { return min(n*e.block, r.ISL-1) }

// Advance runs every step that ends at or before now and returns what
// happened since the last call (Add advances too), in time order. The slice
// is valid until the next call.
func (e *Engine) Advance(now time.Time) []Event {
	e.advance(now)
	out := e.events
	e.events, e.spare = e.spare[:0], out
	return out
}

func (e *Engine) advance(now time.Time) {
	for e.busy && !e.stepEnd.After(now) {
		e.finish()
		e.start(e.stepEnd)
	}
}

// Next returns the end of the first step that will complete a prefill or a
// sequence if nothing arrives meanwhile: the next time Advance has something
// to say. ok is false when the engine is idle.
func (e *Engine) Next() (at time.Time, ok bool) {
	if !e.busy {
		return time.Time{}, false
	}
	if e.observe {
		return e.stepEnd, true
	}
	// Decode-only steps until the first sequence finishes: the batch stays
	// the same (nothing can be scheduled before a sequence leaves), and each
	// step has len(decodes) more tokens of context than the one before.
	left := -1
	for _, s := range e.decodes {
		if n := s.Req.Output - s.Generated - 1; left < 0 || n < left {
			left = n // steps after this one until s finishes
		}
	}
	at, ctx := e.stepEnd, e.context
	for range left {
		ctx += len(e.decodes)
		at = at.Add(e.m.StepTime(0, ctx))
	}
	return at, true
}

// start schedules and starts a step at t, or goes idle.
func (e *Engine) start(t time.Time) {
	for len(e.waiting) > 0 && len(e.running) < e.m.MaxSeqs {
		s := e.waiting[0]
		cached := e.pool.prefix(s.Req.Hashes)
		// A request larger than the whole pool runs alone.
		if !e.pool.fits(s.Req.Hashes, cached, s.private) && (len(e.running) > 0 || s.total <= e.m.KVBlocks) {
			break
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		s.Started = t
		s.CachedTokens = e.cachedTokens(s.Req, cached)
		s.PrefillTokens = s.Req.ISL - s.CachedTokens
		s.prefilled = s.CachedTokens
		s.held = e.pool.acquire(s.Req.Hashes, s.private)
		e.running = append(e.running, s)
	}
	e.decodes, e.chunks = e.decodes[:0], e.chunks[:0]
	e.context, e.observe, e.finishing = 0, false, 0
	budget := e.m.MaxBatchedTokens
	for _, s := range e.running {
		if s.decoding() {
			e.decodes = append(e.decodes, s)
			e.context += s.Req.ISL + s.Generated
			budget--
			if s.Generated+1 == s.Req.Output {
				e.finishing++
			}
		}
	}
	work := 0.0
	for _, s := range e.running {
		if budget <= 0 {
			break
		}
		if !s.decoding() {
			n := min(budget, s.Req.ISL-s.prefilled)
			e.chunks = append(e.chunks, chunk{s, n})
			work += e.m.PrefillWork(s.prefilled, n)
			budget -= n
		}
	}
	if len(e.decodes) == 0 && len(e.chunks) == 0 {
		e.busy = false
		return
	}
	e.busy = true
	e.observe = len(e.chunks) > 0 || e.finishing > 0
	d := e.m.StepTime(work, e.context)
	e.stepEnd = t.Add(d)
	e.steps++
	e.busyTime += d
}

// finish applies the step in progress at its end.
func (e *Engine) finish() {
	at := e.stepEnd
	done := false
	for _, s := range e.decodes {
		if s.Generated++; s.Generated == s.Req.Output {
			s.Finished = at
			done = true
		}
	}
	for _, c := range e.chunks {
		s := c.s
		if s.prefilled += c.n; s.decoding() {
			s.FirstToken = at
			s.Generated = 1
			e.events = append(e.events, Event{Kind: FirstToken, At: at, Seq: s})
			if s.Req.Output == 1 {
				s.Finished = at
				done = true
			}
		}
	}
	if !done {
		return
	}
	kept := e.running[:0]
	for _, s := range e.running {
		if s.Finished.IsZero() {
			kept = append(kept, s)
			continue
		}
		e.pool.release(s.held, s.private)
		s.held = nil
		e.events = append(e.events, Event{Kind: Finished, At: at, Seq: s})
	}
	clear(e.running[len(kept):])
	e.running = kept
}

// NextToken returns when s's next token comes out, if the step in progress
// makes it (a decode, or the chunk that ends its prefill); ok is false when
// s is waiting or has more prompt to compute after this step.
func (e *Engine) NextToken(s *Seq) (at time.Time, ok bool) {
	if !e.busy {
		return time.Time{}, false
	}
	if slices.Contains(e.decodes, s) {
		return e.stepEnd, true
	}
	for _, c := range e.chunks {
		if c.s == s && s.prefilled+c.n == s.Req.ISL {
			return e.stepEnd, true
		}
	}
	return time.Time{}, false
}

// Remove takes s out of the engine at now (after advancing it to now),
// wherever it is: waiting, or running (its blocks released; the step in
// progress keeps its length, as a batch already launched would). It reports
// whether s was in the engine.
func (e *Engine) Remove(now time.Time, s *Seq) bool {
	e.advance(now)
	for i, w := range e.waiting {
		if w == s {
			e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
			return true
		}
	}
	i := slices.Index(e.running, s)
	if i < 0 {
		return false
	}
	e.running = append(e.running[:i], e.running[i+1:]...)
	e.pool.release(s.held, s.private)
	s.held = nil
	if j := slices.Index(e.decodes, s); j >= 0 {
		e.decodes = append(e.decodes[:j], e.decodes[j+1:]...)
		e.context -= s.Req.ISL + s.Generated
		if s.Generated+1 == s.Req.Output {
			e.finishing--
		}
	}
	e.chunks = slices.DeleteFunc(e.chunks, func(c chunk) bool { return c.s == s })
	if len(e.decodes) == 0 && len(e.chunks) == 0 {
		e.busy = false // nothing left of the step; the next Add starts one
		if len(e.running) > 0 || len(e.waiting) > 0 {
			e.start(now)
		}
	}
	return true
}

// Load returns the engine's load now (as of the last Add or Advance).
// Cost: O(waiting + running).
func (e *Engine) Load() Load {
	var l Load
	for _, s := range e.waiting {
		l.ActivePrefillTokens += uint64(s.estimate)
	}
	for _, s := range e.running {
		l.ActivePrefillTokens += uint64(s.Req.ISL - s.prefilled)
		if s.decoding() {
			l.ActiveDecodeBlocks += uint64(s.total)
		}
	}
	l.KVUsedBlocks = uint64(e.pool.used())
	l.ActiveRequests = uint64(len(e.waiting) + len(e.running))
	return l
}

// CachedBlocks returns every hashed block the pool holds (running sequences'
// and cached), for a resynchronisation of the cache's events.
func (e *Engine) CachedBlocks() []uint64 { return e.pool.cachedHashes() }

// Stats counts what an engine did.
type Stats struct {
	// Steps run, and blocks evicted from the prefix cache.
	Steps, Evictions uint64
	// Busy is the time spent in steps (started so far, the one in progress
	// included), in wall time (the steps' durations, scaled). A continuously
	// batched engine steps whenever a sequence runs, however few: it says
	// when the engine worked, not how full its steps were.
	Busy time.Duration
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	return Stats{Steps: e.steps, Evictions: e.pool.evictions, Busy: e.busyTime}
}
