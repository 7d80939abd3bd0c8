package batching

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// small is a model with round numbers: a 1 ms floor, 1 µs a prompt token,
// 1 ns a context token, no attention, 100 tokens a step, blocks of 10.
var small = Model{
	Name:                  "test",
	StepFloor:             time.Millisecond,
	PrefillPerToken:       time.Microsecond,
	DecodePerContextToken: 1,
	MaxBatchedTokens:      100,
	MaxSeqs:               8,
	KVBlocks:              1000,
	BlockSize:             10,
}

var t0 = time.Unix(1000, 0)

func newEngine(t *testing.T, m Model, obs CacheObserver) *Engine {
	t.Helper()
	e, err := New(m, obs)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func add(t *testing.T, e *Engine, at time.Time, r *Request) *Seq {
	t.Helper()
	s, err := e.Add(at, r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hashes returns n distinct block hashes of prompt p (the first shared
// ones equal across prompts of the same p).
func hashes(p, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(p)<<32 | uint64(i)
	}
	return out
}

// runAll advances e to the end and returns every event.
func runAll(e *Engine) []Event {
	var all []Event
	for {
		at, ok := e.Next()
		if !ok {
			return all
		}
		all = append(all, e.Advance(at)...)
	}
}

// A lone request: its prompt in chunks of the budget, its first token at the
// end of the last chunk, then one decode step per further token, each with
// one more token of context.
func TestEngineLoneRequest(t *testing.T) {
	e := newEngine(t, small, nil)
	s := add(t, e, t0, &Request{ID: "a", ISL: 250, Output: 3})
	chunks := []int{100, 100, 50}
	at := t0
	for _, n := range chunks {
		at = at.Add(small.StepTime(float64(n), 0))
	}
	first := at
	at = at.Add(small.StepTime(0, 251)).Add(small.StepTime(0, 252))
	evs := runAll(e)
	if len(evs) != 2 || evs[0].Kind != FirstToken || evs[1].Kind != Finished {
		t.Fatalf("events: got %+v, want first token then finished", evs)
	}
	if !s.FirstToken.Equal(first) || !s.Finished.Equal(at) {
		t.Errorf("first token %v, finished %v: want %v, %v", s.FirstToken.Sub(t0), s.Finished.Sub(t0), first.Sub(t0), at.Sub(t0))
	}
	if s.PrefillTokens != 250 || s.CachedTokens != 0 || s.Generated != 3 {
		t.Errorf("got prefill %d cached %d generated %d, want 250 0 3", s.PrefillTokens, s.CachedTokens, s.Generated)
	}
	if got := e.Stats().Steps; got != 5 {
		t.Errorf("steps: got %d, want 5", got)
	}
	if got := e.Load(); got != (Load{}) {
		t.Errorf("load when idle: got %+v", got)
	}
}

// Continuous batching: a request arriving while another decodes joins at the
// next step; its prefill chunk shares the step with the decode (decodes
// first in the budget), which that step slows.
func TestEngineArrivalJoinsAtTheNextStep(t *testing.T) {
	e := newEngine(t, small, nil)
	a := add(t, e, t0, &Request{ID: "a", ISL: 50, Output: 10})
	step1 := small.StepTime(50, 0) // a's prefill
	// b arrives during a's second step (its first decode).
	b := add(t, e, t0.Add(step1+time.Microsecond), &Request{ID: "b", ISL: 150, Output: 1})
	if b.Started.IsZero() == false {
		t.Fatalf("b started during a step: %v", b.Started)
	}
	step2 := small.StepTime(0, 51)
	runAll(e)
	if want := t0.Add(step1 + step2); !b.Started.Equal(want) {
		t.Errorf("b started at %v, want the end of a's step 2, %v", b.Started.Sub(t0), want.Sub(t0))
	}
	// Step 3: a decodes (1 token of the budget), b prefills 99.
	step3 := small.StepTime(99, 52)
	step4 := small.StepTime(51, 53)
	if want := t0.Add(step1 + step2 + step3 + step4); !b.FirstToken.Equal(want) || !b.Finished.Equal(want) {
		t.Errorf("b first token %v finished %v, want %v (one output token)", b.FirstToken.Sub(t0), b.Finished.Sub(t0), want.Sub(t0))
	}
	if a.Finished.Before(b.Finished) {
		t.Errorf("a (10 tokens) finished before b")
	}
}

// Decode steps slow as the batch and its contexts grow.
func TestEngineDecodeStepGrowsWithTheBatch(t *testing.T) {
	m := small
	m.DecodePerContextToken = 1000 // 1 µs a context token
	var steps []time.Duration
	for _, n := range []int{1, 4, 16} {
		e := newEngine(t, m, nil)
		var seqs []*Seq
		for i := range n {
			seqs = append(seqs, add(t, e, t0, &Request{ID: fmt.Sprint(i), ISL: 5, Output: 3}))
		}
		runAll(e)
		// The last step is a decode of all n at context 5+2.
		last := seqs[0].Finished.Sub(seqs[0].FirstToken) / 2
		steps = append(steps, last)
	}
	if !(steps[0] < steps[1] && steps[1] < steps[2]) {
		t.Errorf("decode step at batch 1, 4, 16: got %v, want increasing", steps)
	}
}

type recorder struct{ stored, removed []uint64 }

func (r *recorder) Stored(h []uint64)  { r.stored = append(r.stored, h...) }
func (r *recorder) Removed(h []uint64) { r.removed = append(r.removed, h...) }

// The prefix cache: a later request sharing blocks skips them; the last
// prompt token is always computed; events tell what was stored.
func TestEnginePrefixCache(t *testing.T) {
	rec := &recorder{}
	e := newEngine(t, small, rec)
	add(t, e, t0, &Request{ID: "a", ISL: 45, Output: 1, Hashes: hashes(1, 4)})
	runAll(e)
	if !slices.Equal(rec.stored, hashes(1, 4)) {
		t.Errorf("stored: got %x, want a's 4 blocks", rec.stored)
	}
	shared := append(hashes(1, 2), hashes(2, 3)[2:]...)
	b := add(t, e, t0.Add(time.Second), &Request{ID: "b", ISL: 30, Output: 1, Hashes: shared})
	full := add(t, e, t0.Add(time.Second), &Request{ID: "c", ISL: 40, Output: 1, Hashes: hashes(1, 4)})
	runAll(e)
	if b.CachedTokens != 20 || b.PrefillTokens != 10 {
		t.Errorf("b: cached %d prefill %d, want 20 10", b.CachedTokens, b.PrefillTokens)
	}
	if full.CachedTokens != 39 || full.PrefillTokens != 1 {
		t.Errorf("fully cached c: cached %d prefill %d, want 39 1 (the last token computed)", full.CachedTokens, full.PrefillTokens)
	}
	if want := append(hashes(1, 4), hashes(2, 3)[2]); !slices.Equal(rec.stored, want) {
		t.Errorf("stored: got %x, want %x", rec.stored, want)
	}
	if len(rec.removed) != 0 {
		t.Errorf("removed %x from a pool with room", rec.removed)
	}
}

// Eviction is LRU over unheld blocks, a released prefix's tail first; held
// blocks are never evicted.
func TestEngineEvictsLeastRecentlyReleasedTailFirst(t *testing.T) {
	m := small
	m.KVBlocks = 5
	rec := &recorder{}
	e := newEngine(t, m, rec)
	add(t, e, t0, &Request{ID: "a", ISL: 30, Output: 1, Hashes: hashes(1, 3)}) // 4 blocks: 3 hashed + 1 private (output)
	runAll(e)
	add(t, e, t0.Add(time.Second), &Request{ID: "b", ISL: 20, Output: 1, Hashes: hashes(2, 2)}) // 3 blocks: room for 2 beside a's 3 cached
	runAll(e)
	if want := []uint64{hashes(1, 3)[2]}; !slices.Equal(rec.removed, want) {
		t.Errorf("removed: got %x, want a's tail %x", rec.removed, want)
	}
	// c shares a's first block, which is then held: the next eviction takes
	// the least recently released of the others, a's second block (b was
	// released after a).
	c := add(t, e, t0.Add(2*time.Second), &Request{ID: "c", ISL: 20, Output: 1, Hashes: []uint64{hashes(1, 1)[0], 99}})
	runAll(e)
	if c.CachedTokens != 10 {
		t.Errorf("c cached %d, want 10", c.CachedTokens)
	}
	if want := []uint64{hashes(1, 3)[2], hashes(1, 3)[1]}; !slices.Equal(rec.removed, want) {
		t.Errorf("removed: got %x, want %x", rec.removed, want)
	}
}

// A request waits in the queue until the pool can hold its prompt and output.
func TestEngineWaitsForKVMemory(t *testing.T) {
	m := small
	m.KVBlocks = 10
	e := newEngine(t, m, nil)
	a := add(t, e, t0, &Request{ID: "a", ISL: 50, Output: 40}) // 9 blocks
	b := add(t, e, t0, &Request{ID: "b", ISL: 10, Output: 10}) // 2 blocks: does not fit beside a
	if l := e.Load(); l.ActiveRequests != 2 || l.ActivePrefillTokens != 60 || l.KVUsedBlocks != 9 {
		t.Errorf("load: got %+v, want 2 requests, 60 prefill tokens, 9 blocks", l)
	}
	runAll(e)
	if !b.Started.Equal(a.Finished) {
		t.Errorf("b started %v, want when a finished, %v", b.Started.Sub(t0), a.Finished.Sub(t0))
	}
	// One larger than the whole pool runs alone rather than never.
	big := add(t, e, t0.Add(time.Hour), &Request{ID: "big", ISL: 500, Output: 1})
	runAll(e)
	if big.Finished.IsZero() {
		t.Errorf("a request larger than the pool never ran")
	}
}

// Next skips decode-only steps exactly: driving the engine from Next to Next
// gives the same timings as advancing it in small increments, on random
// workloads.
func TestEngineNextMatchesFineStepping(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := small
		m.KVBlocks = 40 + rng.IntN(200)
		m.MaxSeqs = 1 + rng.IntN(6)
		var reqs []*Request
		var ats []time.Duration
		at := time.Duration(0)
		for i := range 30 {
			at += time.Duration(rng.IntN(5000)) * time.Microsecond
			ats = append(ats, at)
			reqs = append(reqs, &Request{ID: fmt.Sprint(i), ISL: 1 + rng.IntN(300), Output: 1 + rng.IntN(40), Hashes: hashes(rng.IntN(4), rng.IntN(3))})
		}
		drive := func(fine bool) []string {
			e := newEngine(t, m, nil)
			var out []string
			var seqs []*Seq
			note := func(evs []Event) {
				for _, ev := range evs {
					out = append(out, fmt.Sprintf("%s %d %v", ev.Seq.Req.ID, ev.Kind, ev.At.Sub(t0)))
				}
			}
			now := t0
			for i, r := range reqs {
				arrive := t0.Add(ats[i])
				for {
					next, ok := e.Next()
					if fine && ok {
						next = now.Add(100 * time.Microsecond)
					}
					if !ok || next.After(arrive) {
						break
					}
					now = next
					note(e.Advance(now))
				}
				now = arrive
				r := *r
				seqs = append(seqs, add(t, e, now, &r))
			}
			for {
				next, ok := e.Next()
				if !ok {
					break
				}
				if fine {
					next = now.Add(100 * time.Microsecond)
				}
				now = next
				note(e.Advance(now))
			}
			for _, s := range seqs {
				out = append(out, fmt.Sprintf("%s started %v first %v finished %v", s.Req.ID, s.Started.Sub(t0), s.FirstToken.Sub(t0), s.Finished.Sub(t0)))
			}
			return out
		}
		coarse, fine := drive(false), drive(true)
		// Events come out in time order either way; the fine drive only sees
		// them later (at its next increment), so compare times, not calls.
		if !slices.Equal(coarse[len(coarse)-30:], fine[len(fine)-30:]) {
			for i := range 30 {
				if a, b := coarse[len(coarse)-30+i], fine[len(fine)-30+i]; a != b {
					t.Errorf("seed %d: coarse %q, fine %q", seed, a, b)
				}
			}
		}
		if len(coarse) != len(fine) {
			t.Errorf("seed %d: %d events driven by Next, %d driven finely", seed, len(coarse), len(fine))
		}
	}
}

func TestEngineRejectsEmptyRequests(t *testing.T) {
	e := newEngine(t, small, nil)
	for _, r := range []*Request{{ID: "a", ISL: 0, Output: 1}, {ID: "b", ISL: 5, Output: 0}} {
		if _, err := e.Add(t0, r); err == nil {
			t.Errorf("request %+v: got nil, want an error", r)
		}
	}
}

// Remove takes a request out wherever it is: a waiting one simply leaves;
// a running one frees its slot and blocks for the next, and never finishes.
func TestEngineRemove(t *testing.T) {
	m := small
	m.MaxSeqs = 1
	e := newEngine(t, m, nil)
	a := add(t, e, t0, &Request{ID: "a", ISL: 50, Output: 100, Hashes: hashes(1, 5)})
	b := add(t, e, t0, &Request{ID: "b", ISL: 50, Output: 1})
	c := add(t, e, t0, &Request{ID: "c", ISL: 50, Output: 1})
	at := t0.Add(small.StepTime(50, 0) + time.Microsecond) // a decodes
	if !e.Remove(at, b) || e.Remove(at, b) {
		t.Fatalf("removing waiting b: want true once")
	}
	if !e.Remove(at, a) {
		t.Fatalf("removing running a: got false")
	}
	evs := runAll(e) // a's first token, before its removal, then c's two
	if len(evs) != 3 || evs[0].Seq != a || evs[2].Seq != c || evs[2].Kind != Finished || !c.Started.Equal(at) {
		t.Errorf("after the removals: events %+v, c started %v; want a's first token, then c, started when a left", evs, c.Started.Sub(t0))
	}
	if !a.Finished.IsZero() || e.pool.used() != 0 {
		t.Errorf("a finished %v, %d blocks held; want never, 0", a.Finished, e.pool.used())
	}
	// a's prompt blocks stay cached.
	if got := e.pool.prefix(hashes(1, 5)); got != 5 {
		t.Errorf("a's blocks cached after its removal: got %d, want 5", got)
	}
}
