package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/wire"
	"fairdispatch/workers"
)

// kvSimWorker is a one-rank engine with an LRU prefix cache of capacity
// blocks, publishing its cache changes to the index as events. A request
// takes 2 ticks plus one per 8 uncached blocks; its uncached tokens count as
// active prefill until it completes.
type kvSimWorker struct {
	id       string
	capacity int
	lastUse  map[uint64]int // block -> tick of last use
	eventID  uint64
	running  []kvSimReq
	prefill  uint64
	seen     uint64
	requests int
	cached   uint64 // prompt tokens found in the cache
	prompt   uint64 // prompt tokens received
}

type kvSimReq struct {
	doneAt   int
	uncached uint64
}

func (w *kvSimWorker) report() workers.Report {
	return workers.Report{
		WorkerID: w.id, DPSize: 1, TTLms: 600000, Instance: "sim", SeenSeq: w.seen, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{ActivePrefillTokens: w.prefill, ActiveRequests: uint64(len(w.running))}},
	}
}

func (w *kvSimWorker) receive(t *testing.T, x *kvindex.Index, tick int, prompt []uint64, seq uint64) {
	hit := 0
	for hit < len(prompt) {
		if _, ok := w.lastUse[prompt[hit]]; !ok {
			break
		}
		hit++
	}
	const block = 16
	w.requests++
	w.cached += uint64(hit * block)
	w.prompt += uint64(len(prompt) * block)
	ev := &wire.KVEvent{Instance: "sim", Rank: 0}
	for _, h := range prompt {
		if _, ok := w.lastUse[h]; !ok {
			ev.Stored[wire.Device] = append(ev.Stored[wire.Device], h)
		}
		w.lastUse[h] = tick
	}
	for len(w.lastUse) > w.capacity {
		var victim uint64
		oldest := math.MaxInt
		for h, u := range w.lastUse {
			if u < oldest || u == oldest && h < victim {
				victim, oldest = h, u
			}
		}
		delete(w.lastUse, victim)
		ev.Removed[wire.Device] = append(ev.Removed[wire.Device], victim)
	}
	w.eventID++
	ev.ID = w.eventID
	if x != nil {
		// Removed before stored: a block evicted and stored again in one
		// event cannot happen here (the prompt's blocks are the most recent).
		if r, err := x.Apply(w.id, ev); err != nil || r.Gap || r.Evictions > 0 {
			t.Fatalf("Apply: %+v, %v", r, err)
		}
	}
	uncached := uint64((len(prompt) - hit) * block)
	w.running = append(w.running, kvSimReq{doneAt: tick + 2 + (len(prompt)-hit)/8, uncached: uncached})
	w.prefill += uncached
	w.seen = max(w.seen, seq)
}

func (w *kvSimWorker) advance(tick int) {
	kept := w.running[:0]
	for _, r := range w.running {
		if r.doneAt <= tick {
			w.prefill -= r.uncached
			continue
		}
		kept = append(kept, r)
	}
	w.running = kept
}

// kvSim runs n requests, one per tick, over three workers with prefix
// caches of capacity blocks each. Each request is one of 50 shared prefixes
// (Zipf-distributed, s = 1.1; each 2 to 64 blocks long) followed by 4 blocks
// of its own. With hashes the scheduler scores with the index; without, it
// sees only load; credit is overlap_score_credit. It returns the fleet's cache hit rate (cached prompt tokens
// over prompt tokens, as the workers measure it) and the requests per worker.
func kvSim(t *testing.T, withHashes bool, n, capacity int, credit float64) (float64, []int) {
	pol, err := configs.Parse("sim.yaml", []byte(`default_policy_family: all
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: all, policy_family: all, cache_bucket: all, quantum: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	var x *kvindex.Index
	if withHashes {
		if x, err = kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	var now int64 = 1e18
	sc := filters.DefaultScoring()
	sc.OverlapCredit = credit
	s := New(Config{Policy: pol, Scoring: sc, Rand: rand.New(rand.NewPCG(3, 4)), KV: x}, now)
	ws := make([]*kvSimWorker, 3)
	for i := range ws {
		ws[i] = &kvSimWorker{id: fmt.Sprint("w", i), capacity: capacity, lastUse: map[uint64]int{}}
		s.Report(now, ws[i].report())
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const prefixes = 50
	lengths := make([]int, prefixes)
	cdf := make([]float64, prefixes)
	sum := 0.0
	for p := range prefixes {
		lengths[p] = 2 + rng.IntN(63)
		sum += 1 / math.Pow(float64(p+1), 1.1)
		cdf[p] = sum
	}
	for tick := range n {
		for _, w := range ws {
			w.advance(tick)
			s.Report(now, w.report())
		}
		u := rng.Float64() * sum
		p := 0
		for cdf[p] < u {
			p++
		}
		prompt := make([]uint64, 0, lengths[p]+4)
		for j := range lengths[p] {
			prompt = append(prompt, uint64(p+1)<<32|uint64(j))
		}
		for j := range 4 {
			prompt = append(prompt, 1<<62|uint64(tick)<<8|uint64(j))
		}
		a := &request.Arrival{ID: fmt.Sprint("r", tick), Token: "all", ISL: uint64(len(prompt) * 16), Published: now}
		if withHashes {
			a.Hashes = prompt
		}
		d := s.Arrive(now, a)
		if d.Kind != Dispatch {
			t.Fatalf("request %d: decision %d (%v), want a dispatch", tick, d.Kind, d.Err)
		}
		for _, w := range ws {
			if w.id == d.Worker {
				w.receive(t, x, tick, prompt, d.Seq)
				s.Report(now, w.report())
			}
		}
	}
	var cached, prompt uint64
	counts := make([]int, len(ws))
	for i, w := range ws {
		cached += w.cached
		prompt += w.prompt
		counts[i] = w.requests
	}
	return float64(cached) / float64(prompt), counts
}

// TestKVSimHitRate is acceptance 2 of issue 11 in the scheduling core (the
// end-to-end test with mock workers belongs to the dispatcher's wiring):
// three workers with prefix caches, 50 Zipf-distributed shared prefixes of 2
// to 64 blocks. With block hashes the fleet's cache hit rate is at least 1.5
// times that without (the run without is the negative control), and no
// worker gets more than 1.5 times its fair share of requests.
//
// The margin depends on overlap_score_credit and on the caches' size. This
// test uses credit 2 and 200 blocks per worker (the prefixes total about 1650
// blocks): 0.49 against 0.31 here, 1.6 to 1.9 times over other seeds, the
// busiest worker at most 1.11 times its share. With the default credit 1 the
// ratio is only 1.3 to 1.4 (capacities 100 to 600), load outweighing
// overlap; with credit 4 and 400 blocks one worker gets 1.77 times its share.
func TestKVSimHitRate(t *testing.T) {
	const n, capacity, credit = 3000, 200, 2
	with, counts := kvSim(t, true, n, capacity, credit)
	without, countsWithout := kvSim(t, false, n, capacity, credit)
	t.Logf("hit rate with hashes %.3f %v, without %.3f %v", with, counts, without, countsWithout)
	if with < 1.5*without {
		t.Errorf("hit rate with hashes %.3f, without %.3f: want at least 1.5 times", with, without)
	}
	for i, c := range counts {
		if float64(c) > 1.5*float64(n)/3 {
			t.Errorf("worker %d got %d of %d requests, more than 1.5 times its fair share", i, c, n)
		}
	}
}
