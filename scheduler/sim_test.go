package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// simWorker is a virtual-time model of one engine: it runs up to seqs requests
// at once, each prefilling its prompt in prefillNs and then decoding one token in
// decodeNs; requests beyond seqs wait inside it. It reports its load after every
// change, counting every request it has received (seen_seq).
type simWorker struct {
	id       string
	seqs     int
	waiting  []simReq // received, no slot yet
	running  []simReq // in a slot
	seen     uint64
	prefill  uint64 // tokens of requests received and not finished prefilling
	active   uint64
	prefillN int64
	decodeN  int64
}

type simReq struct {
	class    int
	cost     uint64
	prefEnd  int64 // when its prefill ends (running only)
	doneAt   int64 // when it completes
	prefDone bool
}

func (w *simWorker) report() workers.Report {
	return workers.Report{
		WorkerID: w.id, DPSize: 1, TTLms: 3000, Instance: "sim", SeenSeq: w.seen, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{ActivePrefillTokens: w.prefill, ActiveRequests: w.active}},
	}
}

func (w *simWorker) receive(now int64, class int, cost, seq uint64) {
	w.waiting = append(w.waiting, simReq{class: class, cost: cost})
	w.prefill += cost
	w.active++
	w.seen = max(w.seen, seq)
	w.startWaiting(now)
}

func (w *simWorker) startWaiting(now int64) {
	for len(w.running) < w.seqs && len(w.waiting) > 0 {
		r := w.waiting[0]
		w.waiting = w.waiting[1:]
		r.prefEnd = now + w.prefillN
		r.doneAt = r.prefEnd + w.decodeN
		w.running = append(w.running, r)
	}
}

// nextEvent returns the time of the worker's next state change, or -1.
func (w *simWorker) nextEvent() int64 {
	t := int64(-1)
	for _, r := range w.running {
		e := r.doneAt
		if !r.prefDone {
			e = r.prefEnd
		}
		if t < 0 || e < t {
			t = e
		}
	}
	return t
}

// advance applies every change due at now and returns the classes completed.
func (w *simWorker) advance(now int64) (done []int) {
	kept := w.running[:0]
	for _, r := range w.running {
		if !r.prefDone && r.prefEnd <= now {
			r.prefDone = true
			w.prefill -= r.cost
		}
		if r.prefDone && r.doneAt <= now {
			done = append(done, r.class)
			w.active--
			continue
		}
		kept = append(kept, r)
	}
	w.running = kept
	w.startWaiting(now)
	return done
}

// premiumRegular runs the seed's regression workload (docs/design.md, DRR, seed
// drr-queue-scheduling.txt): one worker running four sequences, 512-token
// prompts, one output token, prefill_busy_threshold 1536, 320 requests per
// class released at once in alternating order. It returns the completions in order.
func premiumRegular(t testing.TB, premiumQ, regularQ int) []int {
	return premiumRegularKeys(t, premiumQ, regularQ, 0)
}

// premiumRegularKeys is premiumRegular with the requests of each class spread
// round robin over keys fairness keys (0: none given).
func premiumRegularKeys(t testing.TB, premiumQ, regularQ, keys int) []int {
	yaml := fmt.Sprintf(`default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: %d, prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
`, premiumQ, regularQ)
	pol, err := configs.Parse("sim.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var now int64 = 1e18
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2))}, now)
	w := &simWorker{id: "w1", seqs: 4, prefillN: 25e6, decodeN: 5e6}
	s.Report(now, w.report())

	dispatch := func(d Decision) {
		switch d.Kind {
		case Dispatch:
			w.receive(now, d.Req.Class, d.Req.Cost, d.Seq)
		case Reject:
			t.Fatalf("request %s rejected: %v", d.Req.ID, d.Err)
		}
	}
	tokens := []string{"premium", "regular"}
	for i := range 640 {
		a := &request.Arrival{ID: fmt.Sprint("r", i), Token: tokens[i%2], ISL: 512, Published: now}
		if keys > 0 {
			a.Key = fmt.Sprint("k", i/2%keys)
		}
		dispatch(s.Arrive(now, a))
		s.Report(now, w.report())
	}
	var order []int
	for len(order) < 640 {
		next := w.nextEvent()
		if next < 0 {
			t.Fatalf("stalled after %d completions with %d+%d queued", len(order), s.Queued(0), s.Queued(1))
		}
		now = next
		order = append(order, w.advance(now)...)
		s.Report(now, w.report())
		for d := s.Next(now); d.Kind != None; d = s.Next(now) {
			dispatch(d)
			s.Report(now, w.report())
		}
	}
	return order
}

func countPremium(order []int, n int) int {
	p := 0
	for _, c := range order[:n] {
		if c == 0 {
			p++
		}
	}
	return p
}

func TestPremiumRegularWeighted(t *testing.T) {
	order := premiumRegular(t, 512, 128)
	got := countPremium(order, 320)
	t.Logf("weighted 512:128: the first 320 completions: premium %d regular %d", got, 320-got)
	if got < 250 || got > 262 {
		t.Errorf("weighted 512:128: premium in first 320 completions = %d, want 250..262", got)
	}
}

func TestPremiumRegularEqual(t *testing.T) {
	order := premiumRegular(t, 512, 512)
	got := countPremium(order, 320)
	t.Logf("equal 512:512: the first 320 completions: premium %d regular %d", got, 320-got)
	if got < 150 || got > 170 {
		t.Errorf("equal 512:512: premium in first 320 completions = %d, want 150..170", got)
	}
}

// TestPremiumRegularWeightedKeys: the seed regression still holds with five
// fairness keys in each class (docs/design.md, Fairness keys).
func TestPremiumRegularWeightedKeys(t *testing.T) {
	order := premiumRegularKeys(t, 512, 128, 5)
	got := countPremium(order, 320)
	t.Logf("weighted 512:128 with 5 keys per class: the first 320 completions: premium %d regular %d", got, 320-got)
	if got < 250 || got > 262 {
		t.Errorf("weighted 512:128 with 5 keys per class: premium in first 320 completions = %d, want 250..262", got)
	}
}
