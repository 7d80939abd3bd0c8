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

func TestSatMul(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{1 << 40, 1 << 40, ^uint64(0)}, // saturates instead of wrapping
		{3, 4, 12},
		{0, ^uint64(0), 0},
	} {
		if got := satMul(c.a, c.b); got != c.want {
			t.Errorf("satMul(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
