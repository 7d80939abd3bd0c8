package scheduler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// The virtual-time tests of docs/design.md, Fairness keys and Cost settlement:
// one worker runs up to four requests at once, each for a time proportional to
// its actual cost; classes queue behind a prefill gate; every tenant is kept
// backlogged. Costs are counted per tenant (the part of the request id before
// the slash), so that the same run can go with the key level disabled (every
// request under one key) as a negative control.

// keyedReq is one request inside keyedWorker.
type keyedReq struct {
	worker string
	seq    uint64
	id     string
	class  int
	actual uint64
	doneAt int64
}

// keyedWorker is a virtual engine: up to slots requests at once, each taking
// nsPerToken per actual token; it reports its actual prefill load and counts
// every request received (seen_seq).
type keyedWorker struct {
	id      string
	slots   int
	running []keyedReq
	seen    uint64
}

func (w *keyedWorker) report() workers.Report {
	var prefill uint64
	for _, r := range w.running {
		prefill += r.actual
	}
	return workers.Report{
		WorkerID: w.id, DPSize: 1, TTLms: 600000, Instance: "sim", SeenSeq: w.seen, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{ActivePrefillTokens: prefill, ActiveRequests: uint64(len(w.running))}},
	}
}

// keyedRun describes one simulation.
type keyedRun struct {
	yaml     string
	tenants  map[string][]string // class token -> tenant names
	depth    func(class, tenant string) int
	cost     func(rng *rand.Rand, tenant string) (est, actual uint64)
	noKeys   bool // every request under the default key: the negative control
	settle   bool // apply completion records
	dispatch int  // dispatches to run
	warmup   int  // dispatches not counted
	// after, when set, is called after every dispatch with the dispatch count.
	after func(n int, tenant string, est uint64)
	// window is Config.KeyWindowStep; 0: the default.
	window int64
	// tick, when set, is called each time the virtual clock advances.
	tick func(s *Scheduler, now int64)
}

// keyedResult is what a run served: per tenant, estimated (charged) and actual cost
// of the counted dispatches, and per class the actual cost.
type keyedResult struct {
	est, actual map[string]float64
	classActual map[int]float64
	settled     int
}

func (r keyedResult) share(m map[string]float64, tenant string) float64 {
	var sum float64
	for _, v := range m {
		sum += v
	}
	return m[tenant] / sum
}

func runKeyed(t testing.TB, run keyedRun) keyedResult {
	t.Helper()
	pol, err := configs.Parse("keys.yaml", []byte(run.yaml))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var now int64 = 1e18
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2)), KeyWindowStep: run.window}, now)
	w := &keyedWorker{id: "w1", slots: 4}
	s.Report(now, w.report())
	res := keyedResult{est: map[string]float64{}, actual: map[string]float64{}, classActual: map[int]float64{}}
	queued := map[string]int{} // class/tenant -> queued requests
	actualOf := map[string]uint64{}
	n, seq := 0, 0
	const nsPerToken = 1000

	var topUp func()
	handle := func(d Decision) {
		if d.Kind != Dispatch {
			t.Fatalf("got decision %d for %s: %v", d.Kind, d.Req.ID, d.Err)
		}
		tn, _, _ := strings.Cut(d.Req.ID, "/")
		queued[pol.Classes[d.Req.Class].Name+"/"+tn]--
		actual := actualOf[d.Req.ID]
		delete(actualOf, d.Req.ID)
		w.running = append(w.running, keyedReq{worker: d.Worker, seq: d.Seq, id: d.Req.ID, class: d.Req.Class,
			actual: actual, doneAt: now + int64(actual)*nsPerToken})
		w.seen = max(w.seen, d.Seq)
		s.Report(now, w.report())
		n++
		if n > run.warmup {
			res.est[tn] += float64(d.Req.Cost)
			res.actual[tn] += float64(actual)
			res.classActual[d.Req.Class] += float64(actual)
		}
		if run.after != nil {
			run.after(n, tn, d.Req.Cost)
		}
	}
	topUp = func() {
		for class, tenants := range run.tenants {
			for _, tn := range tenants {
				ct := class + "/" + tn
				for queued[ct] < run.depth(class, tn) {
					seq++
					est, actual := run.cost(rng, tn)
					a := &request.Arrival{ID: fmt.Sprintf("%s/%d", tn, seq), Token: class, ISL: est, Published: now}
					if !run.noKeys {
						a.Key = tn
					}
					actualOf[a.ID] = actual
					queued[ct]++
					if d := s.Arrive(now, a); d.Kind != Queued {
						handle(d) // dispatched at once: the class was empty and not gated
					}
				}
			}
		}
	}
	for n < run.dispatch {
		topUp()
		for d := s.Next(now); d.Kind != None; d = s.Next(now) {
			handle(d)
			topUp()
		}
		// Advance to the next completion.
		if len(w.running) == 0 {
			t.Fatalf("stalled after %d dispatches", n)
		}
		next := w.running[0].doneAt
		for _, r := range w.running {
			next = min(next, r.doneAt)
		}
		now = next
		kept := w.running[:0]
		for _, r := range w.running {
			if r.doneAt > now {
				kept = append(kept, r)
				continue
			}
			if run.settle {
				got := s.Settle(r.worker, Completion{Seq: r.seq, RequestID: r.id, PrefillTokens: r.actual})
				if got.Outcome != Settled {
					t.Fatalf("settle %s: got %v", r.id, got.Outcome)
				}
				res.settled++
			}
		}
		w.running = kept
		s.Report(now, w.report())
		if run.tick != nil {
			run.tick(s, now)
		}
	}
	return res
}

// oneClass is a class that queues once a 4000-token prefill is in flight.
func oneClass(extra string) string {
	return `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 4000` + extra + `}
`
}

func tenTenants() []string {
	ts := []string{"flood"}
	for i := range 9 {
		ts = append(ts, fmt.Sprint("t", i))
	}
	return ts
}

// floodRun: ten tenants, one sending ten times the others' rate (its backlog
// is ten times deeper), costs 100 to 1000.
func floodRun(noKeys bool) keyedRun {
	return keyedRun{
		yaml:    oneClass(""),
		tenants: map[string][]string{"c": tenTenants()},
		depth: func(_, tn string) int {
			if tn == "flood" {
				return 30
			}
			return 3
		},
		cost: func(rng *rand.Rand, _ string) (uint64, uint64) {
			c := 100 + rng.Uint64N(901)
			return c, c
		},
		noKeys: noKeys, dispatch: 6000, warmup: 200,
	}
}

// TestKeysTenTenantsFlood is acceptance 1 of docs/design.md, Fairness keys: one
// tenant sends ten times the others' rate, all stay backlogged: each gets 10%
// +- 2% of the cost served.
func TestKeysTenTenantsFlood(t *testing.T) {
	res := runKeyed(t, floodRun(false))
	t.Logf("shares: flood %.3f, t0 %.3f", res.share(res.est, "flood"), res.share(res.est, "t0"))
	for _, tn := range tenTenants() {
		if sh := res.share(res.est, tn); sh < 0.08 || sh > 0.12 {
			t.Errorf("tenant %s: got share %.3f, want 0.10 +- 0.02", tn, sh)
		}
	}
}

// TestKeysTenTenantsFloodWithoutKeys is the negative control: the same run with
// every request under one key gives the flooding tenant far more than 12%.
func TestKeysTenTenantsFloodWithoutKeys(t *testing.T) {
	res := runKeyed(t, floodRun(true))
	t.Logf("without keys: flood share %.3f", res.share(res.est, "flood"))
	if sh := res.share(res.est, "flood"); sh <= 0.12 {
		t.Fatalf("without keys: flood got share %.3f, want the fairness check (<= 0.12) to fail", sh)
	}
}

// goldBronze is a run of one class whose keys gold and bronze, weighted 3:1,
// keep 5 requests queued each, of costs uniform in [100, 1000].
func goldBronze() keyedRun {
	return keyedRun{
		yaml:    oneClass(", key_weights: {gold: 3, bronze: 1}"),
		tenants: map[string][]string{"c": {"gold", "bronze"}},
		depth:   func(_, _ string) int { return 5 },
		cost: func(rng *rand.Rand, _ string) (uint64, uint64) {
			c := 100 + rng.Uint64N(901)
			return c, c
		},
	}
}

// TestKeysWeights is acceptance 2: weights 3:1 give 75/25 +- 2%.
func TestKeysWeights(t *testing.T) {
	run := goldBronze()
	run.dispatch, run.warmup = 5000, 100
	res := runKeyed(t, run)
	t.Logf("gold share %.3f", res.share(res.est, "gold"))
	if sh := res.share(res.est, "gold"); sh < 0.73 || sh > 0.77 {
		t.Fatalf("gold: got share %.3f, want 0.75 +- 0.02", sh)
	}
}

// TestKeysIdleReturnNoBurst is acceptance 3: a tenant idle for a long time and
// then backlogged gets no burst beyond the bound of docs/design.md, Fairness
// keys (2 * Cmax / min(w) with weights 1); the largest lead it takes is measured.
func TestKeysIdleReturnNoBurst(t *testing.T) {
	const cmax = 1000
	back := 2000 // dispatches after which "late" returns
	var sLate, sSteady float64
	lead := 0.0
	lateSent := 0
	res := runKeyed(t, keyedRun{
		yaml:    oneClass(""),
		tenants: map[string][]string{"c": {"steady", "late"}},
		depth: func(_, tn string) int {
			if tn == "late" && back > 0 {
				// One request at the start (the key is then remembered, owed its
				// settlement, with little service), then idle.
				if lateSent == 0 {
					lateSent++
					return 1
				}
				return 0
			}
			return 20
		},
		cost:     func(_ *rand.Rand, _ string) (uint64, uint64) { return cmax, cmax },
		dispatch: 3000,
		after: func(n int, tn string, est uint64) {
			if n == back {
				back = 0 // late comes back now: its depth goes to 20
			}
			if back != 0 {
				return
			}
			if tn == "late" {
				sLate += float64(est)
			} else {
				sSteady += float64(est)
			}
			lead = max(lead, sLate-sSteady)
		},
	})
	t.Logf("largest lead of the returning tenant: %.0f tokens (bound %d)", lead, 2*cmax)
	if lead > 2*cmax {
		t.Fatalf("returning tenant led by %.0f, want <= 2*Cmax = %d", lead, 2*cmax)
	}
	if res.est["late"] == 0 {
		t.Fatal("late tenant never served")
	}
}

// misestimated: tenant "a" really costs ten times its estimate, "b" is exact.
func misestimated(rng *rand.Rand, tn string) (uint64, uint64) {
	c := 50 + rng.Uint64N(51)
	if tn == "a" {
		return c, 10 * c
	}
	return c, c
}

// TestKeysSettlement is acceptance 4, one class: without settlement the
// under-estimated tenant gets far more than half of the real cost; with it, each
// gets half +- 3%.
func TestKeysSettlement(t *testing.T) {
	run := keyedRun{
		yaml:    oneClass(""),
		tenants: map[string][]string{"c": {"a", "b"}},
		depth:   func(_, _ string) int { return 5 },
		cost:    misestimated, dispatch: 6000, warmup: 500,
	}
	without := runKeyed(t, run)
	t.Logf("real-cost share of a without settlement %.3f", without.share(without.actual, "a"))
	if sh := without.share(without.actual, "a"); sh < 0.8 {
		t.Errorf("without settlement: a got %.3f of the real cost, want far more than half (>= 0.8)", sh)
	}
	run.settle = true
	with := runKeyed(t, run)
	t.Logf("real-cost share of a with settlement %.3f", with.share(with.actual, "a"))
	if sh := with.share(with.actual, "a"); sh < 0.47 || sh > 0.53 {
		t.Errorf("with settlement: a got %.3f of the real cost, want 0.50 +- 0.03", sh)
	}
}

// TestKeysSettlementClasses is acceptance 4, two classes at 512:128: premium's
// requests really cost ten times their estimate; with settlement (and negative
// deficits) the real-cost split returns to 4:1 +- 3%.
func TestKeysSettlementClasses(t *testing.T) {
	run := keyedRun{
		yaml: `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1500}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1500}
`,
		tenants: map[string][]string{"premium": {"a"}, "regular": {"b"}},
		depth:   func(_, _ string) int { return 5 },
		cost:    misestimated, dispatch: 8000, warmup: 500,
	}
	premiumShare := func(r keyedResult) float64 { return r.classActual[0] / (r.classActual[0] + r.classActual[1]) }
	without := runKeyed(t, run)
	t.Logf("premium real-cost share without settlement %.3f", premiumShare(without))
	if sh := premiumShare(without); sh < 0.9 {
		t.Errorf("without settlement: premium got %.3f of the real cost, want far more than 0.8 (>= 0.9)", sh)
	}
	run.settle = true
	with := runKeyed(t, run)
	t.Logf("premium real-cost share with settlement %.3f", premiumShare(with))
	if sh := premiumShare(with); sh < 0.77 || sh > 0.83 {
		t.Errorf("with settlement: premium got %.3f of the real cost, want 0.80 +- 0.03", sh)
	}
}
