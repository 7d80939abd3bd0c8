package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// TestKeyFairnessWeights: two keys weighted 3:1 and both backlogged are
// served in proportion, and the window says so: Jain's index near 1, each
// key's share next to its weight's share (0.75 and 0.25).
func TestKeyFairnessWeights(t *testing.T) {
	var last []wire.ClassStats
	var lastAt, firstAt int64
	run := goldBronze()
	run.dispatch = 20000
	run.window = 2e8 // 0.2 s of virtual time: the run lasts about 1 s
	run.tick = func(s *Scheduler, now int64) {
		if firstAt == 0 {
			firstAt = now
		}
		if now-lastAt >= 4e7 { // a tenth of the window's length, as the dispatcher does
			last = s.Stats(nil)
			s.KeyFairness(now, last)
			lastAt = now
		}
	}
	res := runKeyed(t, run)
	if lastAt-firstAt < 4e8 {
		t.Fatalf("the run lasted %d ms of virtual time, want more than two window steps", (lastAt-firstAt)/1e6)
	}
	f := last[0].KeyFairness
	if f == nil || f.Jain == nil {
		t.Fatalf("got key fairness %+v, want a measure", f)
	}
	t.Logf("window %.1f s, %d keys, jain %.4f, share/weight max %.3f min %.3f (gold share over the run %.3f)",
		f.WindowSeconds, f.Keys, *f.Jain, *f.MaxShareOverWeight, *f.MinShareOverWeight, res.share(res.est, "gold"))
	if f.Keys != 2 || f.WindowSeconds < 0.2 || f.WindowSeconds >= 0.4 {
		t.Errorf("got %d keys over %.2f s, want 2 over 0.2 to 0.4 s", f.Keys, f.WindowSeconds)
	}
	if *f.Jain < 0.999 || *f.MaxShareOverWeight > 1.02 || *f.MinShareOverWeight < 0.98 {
		t.Errorf("got jain %.4f, share/weight %.3f..%.3f, want about 1", *f.Jain, *f.MinShareOverWeight, *f.MaxShareOverWeight)
	}
	for _, ks := range last[0].TopKeys {
		if ks.Share == nil || ks.WeightShare == nil {
			t.Fatalf("key %s: no share", ks.Key)
		}
		want := map[string]float64{"gold": 0.75, "bronze": 0.25}[ks.Key]
		if *ks.WeightShare != want || *ks.Share < want-0.01 || *ks.Share > want+0.01 {
			t.Errorf("key %s: got share %.3f weight share %.3f, want both %.2f", ks.Key, *ks.Share, *ks.WeightShare, want)
		}
	}
}

// TestKeyFairnessStarved: a key backlogged but blocked (its requests pinned to
// a worker busy throughout) gets no service while another is served: the
// window shows it, Jain's index 0.5 over the two keys and the starved key's
// share 0 against a weight share of one half.
func TestKeyFairnessStarved(t *testing.T) {
	pol, err := configs.Parse("k.yaml", []byte(oneClass("")))
	if err != nil {
		t.Fatal(err)
	}
	var now int64 = 1e18
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2))}, now)
	free := &keyedWorker{id: "free"}
	busy := &keyedWorker{id: "busy", running: []keyedReq{{actual: 5000}}} // above the 4000 threshold
	report := func() {
		s.Report(now, free.report())
		s.Report(now, busy.report())
	}
	report()
	n, queued := 0, 0
	arrive := func(key, pin string) {
		n++
		a := &request.Arrival{ID: fmt.Sprint("r", n), Token: "c", ISL: 100, Key: key, Published: now}
		if pin != "" {
			a.Pin.Worker, a.Pin.Rank = pin, 0
		}
		if d := s.Arrive(now, a); d.Kind != Queued {
			t.Fatalf("arrival %s: got decision %d, want it queued", a.ID, d.Kind)
		}
		if key == "served" {
			queued++
		}
	}
	for range 5 {
		arrive("stuck", "busy")
	}
	topUp := func() {
		for queued < 100 {
			arrive("served", "")
		}
	}
	topUp()
	check := func() []wire.ClassStats {
		st := s.Stats(nil)
		s.KeyFairness(now, st)
		return st
	}
	check() // the first mark
	served := 0
	for range 50 {
		free.running = free.running[:0] // everything running finished
		report()
		for d := s.Next(now); d.Kind != None; d = s.Next(now) {
			if d.Kind != Dispatch || d.Worker != "free" {
				t.Fatalf("got decision %d for %s to %q", d.Kind, d.Req.ID, d.Worker)
			}
			free.running = append(free.running, keyedReq{actual: 100})
			free.seen = max(free.seen, d.Seq)
			report()
			queued--
			served++
		}
		topUp()
		now += 1e8
	}
	if served < 100 {
		t.Fatalf("served %d requests, want the free worker kept busy", served)
	}
	st := check()
	f := st[0].KeyFairness
	if f == nil || f.Jain == nil || f.Keys != 2 {
		t.Fatalf("got %+v, want two keys measured", f)
	}
	if *f.Jain > 0.51 || *f.MinShareOverWeight != 0 || *f.MaxShareOverWeight < 1.99 {
		t.Errorf("got jain %.3f, share/weight %.3f..%.3f, want 0.5, 0 and 2", *f.Jain, *f.MinShareOverWeight, *f.MaxShareOverWeight)
	}
	for _, ks := range st[0].TopKeys {
		if ks.Key == "stuck" && (ks.Share == nil || *ks.Share != 0 || *ks.WeightShare != 0.5) {
			t.Errorf("stuck key: got %+v, want share 0 of weight share 0.5", ks)
		}
	}
}
