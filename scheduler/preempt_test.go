package scheduler

import (
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

const preemptYAML = `default_policy_family: batch
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: interactive, policy_family: interactive, cache_bucket: all, quantum: 512, prefill_busy_threshold: 100000, preempt_after_ms: 100}
  - {name: batch, policy_family: batch, cache_bucket: all, quantum: 512, prefill_busy_threshold: 100000, sheddable: true}
`

func preemptPolicy(t *testing.T, yaml string) *configs.Policy {
	t.Helper()
	p, err := configs.Parse("p.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreemptHoldBackAcrossPolicyChange: while an ask is under way the batch
// class holds back; a policy change (here adding a sheddable class) ends
// the hold-back and keeps what runs, so that the next tick may ask again
// (b1 itself is never asked twice).
func TestPreemptHoldBackAcrossPolicyChange(t *testing.T) {
	now := vstart
	s := New(Config{Policy: preemptPolicy(t, preemptYAML), Scoring: filters.DefaultScoring()}, now)
	s.Report(now, workers.Report{WorkerID: "w1", DPSize: 1, TTLms: 600000, MaxActive: 1, Preempt: true})
	d := s.Arrive(now, &request.Arrival{ID: "b1", Token: "batch", ISL: 100, Published: now})
	if d.Kind != Dispatch {
		t.Fatalf("b1: %v, want a dispatch", d.Kind)
	}
	s.Started(now, d.Req, d.Worker, d.Rank, d.Seq)
	s.Report(now, workers.Report{WorkerID: "w1", DPSize: 1, TTLms: 600000, MaxActive: 1, Preempt: true,
		SeenSeq: d.Seq, HasSeenSeq: true, Ranks: []workers.RankLoad{{ActiveRequests: 1}}})
	if d := s.Arrive(now, &request.Arrival{ID: "i1", Token: "interactive", ISL: 10, Published: now}); d.Kind != Queued {
		t.Fatalf("i1: %v, want queued", d.Kind)
	}
	now += 150e6
	if got := s.Preempt(now, nil); len(got) != 1 || got[0].RequestID != "b1" || got[0].Worker != "w1" {
		t.Fatalf("Preempt = %+v, want one ask of w1 for b1", got)
	}
	if !s.pre.holdsBack(1) || s.pre.holdsBack(0) {
		t.Fatalf("hold-back: batch %v, interactive %v; want true, false", s.pre.holdsBack(1), s.pre.holdsBack(0))
	}
	s.SetPolicy(now, preemptPolicy(t, preemptYAML+
		"  - {name: extra, policy_family: extra, cache_bucket: all, quantum: 512, prefill_busy_threshold: 100000, sheddable: true}\n"))
	if s.pre.yield || s.pre.holdsBack(2) {
		t.Error("a policy change kept the hold-back")
	}
	if es := s.pre.running["w1"]; len(es) != 1 || es[0].class != 1 {
		t.Errorf("running after the change: %+v, want b1 in class 1", es)
	}
	if got := s.Preempt(now+1, nil); len(got) != 0 {
		t.Errorf("Preempt = %+v: b1 was asked already", got)
	}
}

// TestPreemptOffCostsNothing: a policy without a class of each kind asks
// nothing and keeps nothing.
func TestPreemptOffCostsNothing(t *testing.T) {
	s := New(Config{Policy: preemptPolicy(t, deadlineClass("fcfs", false)), Scoring: filters.DefaultScoring()}, vstart)
	s.Report(vstart, workers.Report{WorkerID: "w1", DPSize: 1, TTLms: 600000, Preempt: true})
	d := s.Arrive(vstart, &request.Arrival{ID: "r1", Token: "c", ISL: 100, Published: vstart})
	s.Started(vstart, d.Req, d.Worker, d.Rank, d.Seq)
	if s.pre.on || len(s.pre.running) != 0 || len(s.Preempt(vstart+1e9, nil)) != 0 {
		t.Errorf("preemption state without a preempting class: on %v, running %v", s.pre.on, s.pre.running)
	}
}

// TestPreemptHonoursThePinnedRank: a request pinned to rank 1 of w1 is not
// helped by stopping what runs on rank 0: only the batch request on rank 1
// is asked to stop.
func TestPreemptHonoursThePinnedRank(t *testing.T) {
	now := vstart
	s := New(Config{Policy: preemptPolicy(t, preemptYAML), Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2))}, now)
	rep := func(reqs ...uint64) workers.Report {
		r := workers.Report{WorkerID: "w1", DPSize: 2, TTLms: 600000, MaxActive: 1, Preempt: true}
		for i, n := range reqs {
			r.Ranks = append(r.Ranks, workers.RankLoad{Rank: uint32(i), ActiveRequests: n})
		}
		return r
	}
	s.Report(now, rep(0, 0))
	var onRank [2]string
	for _, id := range []string{"b0", "b1"} {
		d := s.Arrive(now, &request.Arrival{ID: id, Token: "batch", ISL: 100, Published: now})
		if d.Kind != Dispatch {
			t.Fatalf("%s: %v, want a dispatch", id, d.Kind)
		}
		s.Started(now, d.Req, d.Worker, d.Rank, d.Seq)
		onRank[d.Rank] = id
	}
	r := rep(1, 1)
	r.SeenSeq, r.HasSeenSeq = 2, true
	s.Report(now, r)
	if d := s.Arrive(now, &request.Arrival{ID: "i1", Token: "interactive", ISL: 10, Published: now,
		Pin: request.Target{Worker: "w1", Rank: 1}}); d.Kind != Queued {
		t.Fatalf("i1: %v, want queued", d.Kind)
	}
	now += 150e6
	if got := s.Preempt(now, nil); len(got) != 1 || got[0].RequestID != onRank[1] {
		t.Fatalf("Preempt = %+v, want one ask, for %s on rank 1", got, onRank[1])
	}
}
