package scheduler

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

const t0 = int64(1_700_000_000) * 1e9

const twoClasses = `default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: small}
  - {min_tokens: 1000, bucket: large}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: small, quantum: 512, prefill_busy_threshold: 1000, request_queue_limit_per_worker: 2}
  - {name: premium-large, policy_family: premium, cache_bucket: large, quantum: 512, prefill_busy_threshold: 1000}
  - {name: regular, policy_family: regular, cache_bucket: small, quantum: 128, prefill_busy_threshold: 1000, raw_isl_token_queue_limit_per_worker: 100, cached_token_queue_limit_per_worker: 10}
  - {name: regular-large, policy_family: regular, cache_bucket: large, quantum: 128}
  - {name: batch, quantum: 64}
`

type fixture struct {
	t   *testing.T
	s   *Scheduler
	now int64
	n   int
}

func newFixture(t *testing.T, policy string, th filters.Thresholds) *fixture {
	t.Helper()
	pol, err := configs.Parse("test.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Policy: pol, Thresholds: th, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(7, 7))}, t0)
	return &fixture{t: t, s: s, now: t0}
}

// report publishes a one-rank load report for worker id.
func (f *fixture) report(id string, prefill uint64, mod ...func(*workers.Report)) {
	r := workers.Report{WorkerID: id, DPSize: 1, TTLms: 3000, Instance: "i-" + id,
		Ranks: []workers.RankLoad{{ActivePrefillTokens: prefill}}}
	for _, m := range mod {
		m(&r)
	}
	if !f.s.Report(f.now, r) {
		f.t.Fatalf("report of %s refused", id)
	}
}

func (f *fixture) arrive(token string, isl uint64, mod ...func(*request.Arrival)) Decision {
	f.n++
	a := &request.Arrival{ID: token + "-" + string(rune('a'+f.n%26)), Token: token, ISL: isl, Published: f.now + int64(f.n)}
	for _, m := range mod {
		m(a)
	}
	return f.s.Arrive(f.now, a)
}

func (f *fixture) wantKind(d Decision, k Kind) {
	f.t.Helper()
	if d.Kind != k {
		f.t.Fatalf("decision kind = %d (%+v, err %v), want %d", d.Kind, d, d.Err, k)
	}
}

func (f *fixture) wantReject(d Decision, code request.Code) {
	f.t.Helper()
	f.wantKind(d, Reject)
	if d.Err.Code != code {
		f.t.Fatalf("reject code = %s (%s), want %s", d.Err.Code, d.Err.Message, code)
	}
}

func TestArriveDispatchesWhenIdleAndQueuesWhenGated(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	d := f.arrive("premium", 600)
	f.wantKind(d, Dispatch)
	if d.Worker != "w1" || d.Seq != 1 || d.Req.Cost != 600 {
		t.Fatalf("dispatch = %s seq %d cost %d, want w1 seq 1 cost 600", d.Worker, d.Seq, d.Req.Cost)
	}
	// Booked load 600 is not above 1000: still free.
	f.wantKind(f.arrive("premium", 600), Dispatch)
	// 1200 > 1000: gated, so the next one queues.
	f.wantKind(f.arrive("premium", 10), Queued)
	if got := f.s.Next(f.now); got.Kind != None {
		t.Fatalf("Next while gated = %d, want None", got.Kind)
	}
}

func TestNewArrivalNeverOvertakesBacklog(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	first := f.arrive("premium", 10)
	f.wantKind(first, Queued)
	f.report("w1", 0) // idle now, but the class has a backlog
	second := f.arrive("premium", 10)
	f.wantKind(second, Queued)
	d := f.s.Next(f.now)
	f.wantKind(d, Dispatch)
	if d.Req != first.Req {
		t.Fatalf("first dispatch = %s, want the older %s", d.Req.ID, first.Req.ID)
	}
}

func TestNonQueueingClassDispatchesOrFails(t *testing.T) {
	tokens := uint64(100)
	f := newFixture(t, twoClasses, filters.Thresholds{PrefillTokens: &tokens})
	f.report("w1", 50)
	// batch has no threshold: it never queues.
	f.wantKind(f.arrive("batch", 10), Dispatch)
	f.report("w1", 500) // overloaded now
	f.wantReject(f.arrive("batch", 10), request.AllWorkersOverloaded)
}

func TestClassResolution(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	cases := []struct {
		token  string
		isl    uint64
		cached uint64
		want   string
	}{
		{"premium", 999, 0, "premium"},
		{"premium", 1000, 0, "premium-large"},
		{"premium", 1500, 600, "premium"}, // uncached 900
		{"unknown", 10, 0, "regular"},
		{"premium-large", 10, 0, "regular"}, // a family×bucket class name is not a class token
		{"batch", 5000, 0, "batch"},
	}
	for _, c := range cases {
		d := f.arrive(c.token, c.isl, func(a *request.Arrival) { a.Cached = c.cached })
		if got := f.s.Policy().Classes[d.Req.Class].Name; got != c.want {
			t.Errorf("token %q isl %d cached %d: class = %s, want %s", c.token, c.isl, c.cached, got, c.want)
		}
	}
}

func TestSnapshotBestCached(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	f.report("w2", 0, func(r *workers.Report) { r.Taints = []string{"gpu"} })
	ov := []request.Overlap{{Worker: "w1", Tokens: 300}, {Worker: "w2", Tokens: 200}, {Worker: "gone", Tokens: 900}}
	cases := []struct {
		name string
		mod  func(*request.Arrival)
		want uint64
	}{
		{"largest among live", func(a *request.Arrival) { a.Overlap = ov; a.Cached = 50 }, 300},
		{"pinned worker's", func(a *request.Arrival) { a.Overlap = ov; a.Pin = request.Target{Worker: "w2", Rank: request.AnyRank} }, 200},
		{"allow-list", func(a *request.Arrival) { a.Overlap = ov; a.Allowed = []string{"w2"} }, 200},
		{"required taint", func(a *request.Arrival) { a.Overlap = ov; a.Required = []string{"gpu"} }, 200},
		{"header when no overlap", func(a *request.Arrival) { a.Cached = 50 }, 50},
		{"clamped to isl", func(a *request.Arrival) { a.Cached = 5000 }, 400},
	}
	for _, c := range cases {
		d := f.arrive("premium", 400, c.mod)
		if d.Req.Cached != c.want {
			t.Errorf("%s: cached = %d, want %d", c.name, d.Req.Cached, c.want)
		}
		if want := max(1, 400-c.want); d.Req.Cost != want {
			t.Errorf("%s: cost = %d, want %d", c.name, d.Req.Cost, want)
		}
	}
}

// TestSnapshotCarriesHashes checks that Dispatch-Block-Hashes travels in the
// optional Route, so that a request without hashes or constraints still has
// no Route at all.
func TestSnapshotCarriesHashes(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 1<<30) // busy: the requests stay queued
	hs := []uint64{7, 8}
	d := f.arrive("premium", 400, func(a *request.Arrival) { a.Hashes = hs })
	if d.Req.Route == nil || !slices.Equal(d.Req.Route.Hashes, hs) {
		t.Fatalf("route = %+v, want hashes %v", d.Req.Route, hs)
	}
	if d := f.arrive("premium", 400); d.Req.Route != nil {
		t.Fatalf("route = %+v without hashes or constraints, want nil", d.Req.Route)
	}
}

func TestLimits(t *testing.T) {
	t.Run("requests: the example message", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 5000)
		f.wantKind(f.arrive("premium", 1), Queued)
		f.wantKind(f.arrive("premium", 1), Queued)
		d := f.arrive("premium", 1)
		f.wantReject(d, request.QueueFull)
		want := `policy class "premium" queue requests limit reached (current=2, limit=2)`
		if d.Err.Message != want || d.Err.LimitKind != "requests" || d.Err.Current != 2 || d.Err.Limit != 2 {
			t.Fatalf("error = %q %s %d/%d, want %q", d.Err.Message, d.Err.LimitKind, d.Err.Current, d.Err.Limit, want)
		}
	})
	t.Run("limit scales with live workers", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 5000)
		f.report("w2", 5000)
		for range 4 {
			f.wantKind(f.arrive("premium", 1), Queued)
		}
		f.wantReject(f.arrive("premium", 1), request.QueueFull)
	})
	t.Run("the crossing request is accepted", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 5000)
		f.wantKind(f.arrive("regular", 90), Queued)
		f.wantKind(f.arrive("regular", 50), Queued) // 90 < 100: accepted, total 140
		d := f.arrive("regular", 1)
		f.wantReject(d, request.QueueFull)
		if d.Err.LimitKind != "raw_isl_tokens" || d.Err.Current != 140 || d.Err.Limit != 100 {
			t.Fatalf("got %s %d/%d, want raw_isl_tokens 140/100", d.Err.LimitKind, d.Err.Current, d.Err.Limit)
		}
	})
	t.Run("cached tokens after raw isl", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 5000)
		f.wantKind(f.arrive("regular", 20, func(a *request.Arrival) { a.Cached = 15 }), Queued)
		d := f.arrive("regular", 20)
		f.wantReject(d, request.QueueFull)
		if d.Err.LimitKind != "cached_tokens" || d.Err.Current != 15 || d.Err.Limit != 10 {
			t.Fatalf("got %s %d/%d, want cached_tokens 15/10", d.Err.LimitKind, d.Err.Current, d.Err.Limit)
		}
	})
	t.Run("no live workers: no limit applies (a fleet outage), nothing evicted", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 5000)
		f.wantKind(f.arrive("premium", 1), Queued)
		f.now += 4e9
		f.s.Tick(f.now, nil)
		if f.s.Workers().Len() != 0 {
			t.Fatal("worker did not expire")
		}
		for i := range 3 { // the limit is 2 per live worker
			f.wantKind(f.arrive("premium", 1), Queued)
			if got := f.s.Queued(0); got != 2+i {
				t.Fatalf("queued = %d, want %d", got, 2+i)
			}
		}
	})
	t.Run("draining workers count as live", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.report("w1", 0, func(r *workers.Report) { r.Draining = true })
		f.wantKind(f.arrive("premium", 1), Queued)
		f.wantKind(f.arrive("premium", 1), Queued)
		f.wantReject(f.arrive("premium", 1), request.QueueFull)
	})
	t.Run("saturating multiplication", func(t *testing.T) {
		if got := satMul(1<<40, 1<<40); got != ^uint64(0) {
			t.Fatalf("satMul(2^40, 2^40) = %d, want max uint64", got)
		}
		if got := satMul(3, 4); got != 12 {
			t.Fatalf("satMul(3, 4) = %d, want 12", got)
		}
		if got := satMul(0, ^uint64(0)); got != 0 {
			t.Fatalf("satMul(0, max) = %d, want 0", got)
		}
	})
}

func TestSelectionErrors(t *testing.T) {
	zero := uint64(0)
	pin := func(w string) func(*request.Arrival) {
		return func(a *request.Arrival) { a.Pin = request.Target{Worker: w, Rank: request.AnyRank} }
	}
	cases := []struct {
		name string
		mod  func(*request.Arrival)
		want request.Code
	}{
		{"pin outside allow-list", func(a *request.Arrival) { pin("w1")(a); a.Allowed = []string{"w2"} }, request.PinnedWorkerNotAllowed},
		{"pin not live", pin("nobody"), request.NoEndpoints},
		{"pin rank out of range", func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: 3} }, request.NoEndpoints},
		{"pin missing taint", func(a *request.Arrival) { pin("w1")(a); a.Required = []string{"gpu"} }, request.NoEndpoints},
		{"pin overloaded", pin("hot"), request.PinnedWorkerOverloaded},
		{"nothing eligible", func(a *request.Arrival) { a.Required = []string{"tpu"} }, request.NoEndpoints},
		{"all eligible overloaded", func(a *request.Arrival) { a.Allowed = []string{"hot"} }, request.AllWorkersOverloaded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, twoClasses, filters.Thresholds{PrefillTokens: &zero})
			f.report("w1", 0)
			f.report("hot", 1)
			f.wantReject(f.arrive("batch", 10, c.mod), c.want)
		})
	}
	t.Run("no workers at all: held, not failed (a fleet outage)", func(t *testing.T) {
		f := newFixture(t, twoClasses, filters.Thresholds{})
		f.wantKind(f.arrive("premium", 10), Queued)
	})
}

func TestDeadlineExpiresQueuedRequests(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	d := f.arrive("premium", 10, func(a *request.Arrival) { a.DeadlineMs, a.HasDeadline = 500, true })
	f.wantKind(d, Queued)
	if got := f.s.Tick(f.now+499e6, nil); len(got) != 0 {
		t.Fatalf("expired %d before the deadline, want 0", len(got))
	}
	f.now += 600e6
	f.report("w1", 5000) // keep it live
	got := f.s.Tick(f.now, nil)
	if len(got) != 1 || got[0].Req != d.Req || got[0].Err.Code != request.Expired {
		t.Fatalf("Tick = %+v, want one expired %s", got, d.Req.ID)
	}
	if f.s.Queued(0) != 0 {
		t.Fatalf("queued = %d after expiry, want 0", f.s.Queued(0))
	}
	// Arriving already past its deadline into a backlog: rejected at once.
	f.wantKind(f.arrive("premium", 10), Queued)
	f.wantReject(f.arrive("premium", 10, func(a *request.Arrival) { a.Published = f.now - 2e9; a.DeadlineMs, a.HasDeadline = 1000, true }), request.Expired)
}

func TestDispatchedRequestDoesNotExpire(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	f.wantKind(f.arrive("premium", 10, func(a *request.Arrival) { a.DeadlineMs, a.HasDeadline = 500, true }), Queued)
	f.report("w1", 0)
	f.wantKind(f.s.Next(f.now), Dispatch)
	if got := f.s.Tick(f.now+1e9, nil); len(got) != 0 {
		t.Fatalf("Tick expired %d dispatched requests, want 0", len(got))
	}
	if f.s.NextDeadline() != 0 {
		t.Fatalf("NextDeadline = %d, want 0", f.s.NextDeadline())
	}
}

func TestReturnKeepsPlaceAndIsNotChargedAgain(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	a := f.arrive("premium", 600)
	b := f.arrive("premium", 600)
	f.report("w1", 0)
	d := f.s.Next(f.now)
	if d.Req != a.Req {
		t.Fatalf("first dispatch %s, want %s", d.Req.ID, a.Req.ID)
	}
	f.s.Return(f.now, d.Req, d.Worker, d.Seq)
	w := f.s.Workers().Get("w1")
	if w.Ranks[0].Booked != 0 || !w.Excluded {
		t.Fatalf("after refusal booked %d excluded %v, want 0 and true", w.Ranks[0].Booked, w.Excluded)
	}
	if got := f.s.Next(f.now); got.Kind != None {
		t.Fatalf("Next while the refusing worker is excluded = %d, want None", got.Kind)
	}
	deficit := f.s.arb.Deficit(0)
	f.report("w1", 0)
	if got := f.s.Next(f.now); got.Kind != None {
		t.Fatalf("Next after a report within the exclusion = %d, want None (a report does not end it)", got.Kind)
	}
	f.now += workers.MinExclusion
	f.s.Tick(f.now, nil)
	d = f.s.Next(f.now)
	if d.Req != a.Req || f.s.arb.Deficit(0) != deficit {
		t.Fatalf("after report: dispatched %s deficit %d, want %s and deficit %d unchanged", d.Req.ID, f.s.arb.Deficit(0), a.Req.ID, deficit)
	}
	_ = b
}

func TestRefusedRequestWaitsInNonQueueingClass(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	d := f.arrive("batch", 10)
	f.wantKind(d, Dispatch)
	f.s.Return(f.now, d.Req, d.Worker, d.Seq)
	if f.s.Queued(4) != 1 {
		t.Fatalf("batch queued = %d after refusal, want 1", f.s.Queued(4))
	}
	f.now += workers.MinExclusion
	f.report("w1", 0)
	if got := f.s.Next(f.now); got.Kind != Dispatch || got.Req != d.Req {
		t.Fatalf("Next = %d, want the refused request dispatched again", got.Kind)
	}
}

func TestBlockedPinnedLaneDoesNotBlockOthers(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	f.report("w2", 5000)
	pinned := f.arrive("premium", 10, func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: 0} })
	shared := f.arrive("premium", 10)
	f.wantKind(pinned, Queued)
	f.wantKind(shared, Queued)
	f.report("w2", 0) // w1 stays busy
	d := f.s.Next(f.now)
	if d.Kind != Dispatch || d.Req != shared.Req || d.Worker != "w2" {
		t.Fatalf("Next = %s to %s, want the shared request to w2", d.Req.ID, d.Worker)
	}
	if got := f.s.Next(f.now); got.Kind != None {
		t.Fatalf("Next = %d, want None while w1 is busy", got.Kind)
	}
	f.report("w1", 0)
	d = f.s.Next(f.now)
	if d.Req != pinned.Req || d.Worker != "w1" {
		t.Fatalf("Next after w1 frees = %v to %s, want the pinned request to w1", d.Req, d.Worker)
	}
}

func TestWorkerExpiryFailsPinnedQueue(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	f.report("w2", 0)
	f.report("w2", 5000)
	pinned := f.arrive("premium", 10, func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: request.AnyRank} })
	f.wantKind(pinned, Queued)
	f.now += 2e9
	f.report("w2", 5000)
	f.now += 2e9
	f.s.Tick(f.now, nil)
	f.wantReject(f.s.Next(f.now), request.NoEndpoints)
}

func TestGraceQueuesEverything(t *testing.T) {
	pol, _ := configs.Parse("t", []byte(twoClasses))
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Grace: 3e9, Rand: rand.New(rand.NewPCG(1, 1))}, t0)
	for i := range 5 { // no workers and a limit of 2: neither fails during the grace
		d := s.Arrive(t0, &request.Arrival{ID: "g", Token: "premium", ISL: 10, Published: t0 + int64(i)})
		if d.Kind != Queued {
			t.Fatalf("arrival %d during grace: kind %d, want Queued", i, d.Kind)
		}
	}
	s.Report(t0+1e9, workers.Report{WorkerID: "w1", DPSize: 1, TTLms: 10000})
	if d := s.Next(t0 + 2e9); d.Kind != None {
		t.Fatalf("Next during grace = %d, want None", d.Kind)
	}
	if d := s.Next(t0 + 3e9); d.Kind != Dispatch {
		t.Fatalf("Next after grace = %d, want Dispatch", d.Kind)
	}
}

func TestSeqContinuesAboveSeenSeq(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0, func(r *workers.Report) { r.SeenSeq, r.HasSeenSeq = 41, true })
	if d := f.arrive("batch", 1); d.Seq != 42 {
		t.Fatalf("seq = %d, want 42", d.Seq)
	}
}

func TestOrderingWithinClass(t *testing.T) {
	const wspt = `default_policy_family: f
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: c, policy_family: f, cache_bucket: all, queue_policy: %s, quantum: 100000, prefill_busy_threshold: 0}
`
	run := func(policy string, arrivals []func(*request.Arrival)) []string {
		f := newFixture(t, strings.Replace(wspt, "%s", policy, 1), filters.Thresholds{})
		f.report("w1", 1)
		ids := map[*request.Snapshot]string{}
		for i, m := range arrivals {
			d := f.arrive("f", 100, m)
			ids[d.Req] = string(rune('A' + i))
		}
		var got []string
		for range arrivals {
			f.report("w1", 0)
			got = append(got, ids[f.s.Next(f.now).Req])
		}
		return got
	}
	long := func(a *request.Arrival) { a.ISL = 1000 }
	short := func(a *request.Arrival) { a.ISL = 10 }
	if got := strings.Join(run("fcfs", []func(*request.Arrival){long, short}), ""); got != "AB" {
		t.Errorf("fcfs order = %s, want AB (arrival order)", got)
	}
	if got := strings.Join(run("wspt", []func(*request.Arrival){long, short}), ""); got != "BA" {
		t.Errorf("wspt order = %s, want BA (short first)", got)
	}
	jump := func(a *request.Arrival) { a.Jump = 10000 }
	strict := func(a *request.Arrival) { a.Strict = 1 }
	if got := strings.Join(run("fcfs", []func(*request.Arrival){jump, strict}), ""); got != "BA" {
		t.Errorf("strict vs jump = %s, want BA (strict priority 1 first)", got)
	}
	late := func(a *request.Arrival) { a.Published += 5e9; a.Jump = 10 }
	if got := strings.Join(run("fcfs", []func(*request.Arrival){func(*request.Arrival) {}, late}), ""); got != "BA" {
		t.Errorf("jump of 10s over a 5s later arrival = %s, want BA", got)
	}
}

func TestThresholdChangeRechecks(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 500)
	f.wantKind(f.arrive("batch", 10), Dispatch)
	tok := uint64(100)
	f.s.SetThresholds(filters.Thresholds{PrefillTokens: &tok})
	if got := f.s.Thresholds().PrefillTokens; got == nil || *got != 100 {
		t.Fatalf("Thresholds().PrefillTokens = %v, want 100", got)
	}
	f.wantReject(f.arrive("batch", 10), request.AllWorkersOverloaded)
}

func TestPauseStopsExpiry(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 0)
	f.s.Pause()
	f.s.Tick(f.now+10e9, nil)
	if f.s.Workers().Len() != 1 {
		t.Fatal("worker expired while paused")
	}
	f.s.Resume(f.now + 10e9)
	f.s.Tick(f.now+12e9, nil)
	if f.s.Workers().Len() != 1 {
		t.Fatal("worker expired 2s after resume with a 3s ttl")
	}
	f.s.Tick(f.now+14e9, nil)
	if f.s.Workers().Len() != 0 {
		t.Fatal("worker still live 4s after resume")
	}
}

func TestStatsRemoveAndRecheck(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	a := f.arrive("premium", 100, func(a *request.Arrival) { a.DeadlineMs, a.HasDeadline = 9000, true })
	f.arrive("premium", 50, func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: 0}; a.Cached = 10 })
	f.wantKind(a, Queued)
	if f.s.NextDeadline() != a.Req.Deadline {
		t.Fatalf("NextDeadline = %d, want %d", f.s.NextDeadline(), a.Req.Deadline)
	}
	f.s.Next(f.now) // moves the pinned lane aside: w1 is busy
	st := f.s.Stats(nil)
	if len(st) != 5 || st[0].Name != "premium" || st[0].Pending != 2 || st[0].ISLTokens != 150 || st[0].CachedTokens != 10 ||
		st[0].PinnedLanes != 1 || st[0].BlockedLanes != 1 || st[0].FreeRanks != 0 {
		t.Fatalf("Stats()[0] = %+v, want premium: 2 pending, 150 ISL, 10 cached, 1 pinned lane, blocked, 0 free ranks", st[0])
	}
	f.s.RecheckAll()
	if st := f.s.Stats(nil); st[0].BlockedLanes != 0 {
		t.Fatalf("after RecheckAll %d blocked lanes, want 0", st[0].BlockedLanes)
	}
	f.s.Remove(a.Req)
	f.s.Remove(a.Req) // a request no longer queued is left alone
	if f.s.Queued(0) != 1 || f.s.NextDeadline() != 0 {
		t.Fatalf("after Remove: queued %d, next deadline %d; want 1 and none", f.s.Queued(0), f.s.NextDeadline())
	}
}

func TestOverloadedFollowsThresholds(t *testing.T) {
	tok := uint64(100)
	f := newFixture(t, twoClasses, filters.Thresholds{PrefillTokens: &tok})
	f.report("w1", 50)
	f.report("w2", 500)
	if f.s.Overloaded(f.s.Workers().Get("w1")) || !f.s.Overloaded(f.s.Workers().Get("w2")) {
		t.Fatal("want w1 free and w2 overloaded at a threshold of 100 prefill tokens")
	}
	if f.s.Policy().Classes[0].Name != "premium" {
		t.Fatal("Policy() does not return the configured policy")
	}
}

func TestDeadlinesExpireInOrder(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	f.report("w2", 5000)
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []*request.Snapshot
	for range 40 {
		ms := uint64(100 + rng.IntN(900))
		d := f.arrive("regular", 1, func(a *request.Arrival) { a.Published = f.now; a.DeadlineMs, a.HasDeadline = ms, true })
		f.wantKind(d, Queued)
		reqs = append(reqs, d.Req)
	}
	for _, r := range reqs[10:20] { // removed from the middle of the heap
		f.s.Remove(r)
	}
	var last int64
	expired := 0
	for step := int64(0); step <= 1000; step += 50 {
		for _, d := range f.s.Tick(f.now+step*1e6, nil) {
			if d.Req.Deadline < last || d.Req.Deadline > f.now+step*1e6 {
				t.Fatalf("expired deadline %d after %d, at %d", d.Req.Deadline, last, f.now+step*1e6)
			}
			if d.Err.Code != request.Expired || !strings.Contains(d.Err.Error(), "expired") {
				t.Fatalf("error %v, want expired", d.Err)
			}
			last = d.Req.Deadline
			expired++
		}
	}
	if expired != 30 || f.s.Queued(2) != 0 {
		t.Fatalf("expired %d, queued %d; want 30 and 0", expired, f.s.Queued(2))
	}
}

// Unsent releases a booking without excluding the worker: requeued, the
// request is dispatched again at once, uncharged; not requeued, it is gone
// and the next request takes the worker.
func TestUnsentBlamesNoWorker(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	f.report("w1", 5000)
	a := f.arrive("premium", 600)
	b := f.arrive("premium", 600)
	f.report("w1", 0)
	d := f.s.Next(f.now)
	if d.Req != a.Req {
		t.Fatalf("first dispatch %s, want %s", d.Req.ID, a.Req.ID)
	}
	f.s.Unsent(d.Req, d.Worker, d.Seq, true)
	w := f.s.Workers().Get("w1")
	if w.Ranks[0].Booked != 0 || w.Excluded {
		t.Fatalf("after a requeued unsent dispatch booked %d excluded %v, want 0 and false", w.Ranks[0].Booked, w.Excluded)
	}
	deficit := f.s.arb.Deficit(0)
	d = f.s.Next(f.now)
	if d.Kind != Dispatch || d.Req != a.Req || f.s.arb.Deficit(0) != deficit {
		t.Fatalf("Next = %d %v deficit %d, want %s again at no charge (deficit %d)", d.Kind, d.Req, f.s.arb.Deficit(0), a.Req.ID, deficit)
	}
	f.s.Unsent(d.Req, d.Worker, d.Seq, false)
	if w.Ranks[0].Booked != 0 || w.Excluded || f.s.Queued(0) != 1 {
		t.Fatalf("after a dropped unsent dispatch booked %d excluded %v queued %d, want 0, false, 1", w.Ranks[0].Booked, w.Excluded, f.s.Queued(0))
	}
	if d = f.s.Next(f.now); d.Kind != Dispatch || d.Req != b.Req {
		t.Fatalf("Next = %d, want %s dispatched", d.Kind, b.Req.ID)
	}
}
