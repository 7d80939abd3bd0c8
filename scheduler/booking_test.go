package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// TestBookingOnChosenRank is acceptance 5 (docs/protocol.md, Bookings and
// seen_seq): with the KV cache index, a burst of 300 requests of 512 tokens
// (32 blocks of 16) in 10 groups sharing a 24-block prefix arrives before any
// rank holds anything, so their arrival cost is 512; each rank caches a
// prompt when it runs it. What each dispatch books on its rank matches what
// the rank then computes (its prompt less the longest prefix it held, as
// the mock worker counts it) within one block; the arrival cost, the
// negative control, is off for most of them.
func TestBookingOnChosenRank(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, plainClass, 4, 20000)
	f.s = New(Config{Policy: f.pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2)), KV: x}, vstart)
	for _, w := range f.ws {
		f.s.Report(f.now, w.report())
	}
	held := map[string]map[uint64]bool{} // worker -> blocks it holds
	events := map[string]uint64{}
	prompts := map[string][]uint64{}
	for i := range 300 {
		g := uint64(i % 10)
		h := make([]uint64, 32)
		for b := range h {
			h[b] = g<<32 | uint64(b)
			if b >= 24 {
				h[b] = uint64(i+1)<<40 | uint64(b)
			}
		}
		id := fmt.Sprint(i)
		prompts[id] = h
		f.add(vstart, request.Arrival{ID: id, Token: "c", ISL: 512, Hashes: h}, 0)
	}
	n, off, offArrival := 0, 0, 0
	f.onDispatch = func(j *vjob) {
		w, h := j.d.Worker, prompts[j.d.Req.ID]
		if held[w] == nil {
			held[w] = map[uint64]bool{}
		}
		hit := 0
		for hit < len(h) && held[w][h[hit]] {
			hit++
		}
		computed := uint64(512 - 16*hit)
		diff := int64(j.d.Prefill) - int64(computed)
		n++
		if diff > 16 || diff < -16 {
			off++
			t.Errorf("%s on %s: booked %d, the rank computes %d", j.d.Req.ID, w, j.d.Prefill, computed)
		}
		if d := int64(j.d.Req.Cost) - int64(computed); d > 16 || d < -16 {
			offArrival++
		}
		for _, b := range h {
			held[w][b] = true
		}
		events[w]++
		ev := &wire.KVEvent{Instance: "a", ID: events[w]}
		ev.Stored[wire.Device] = h
		if _, err := x.Apply(w, ev); err != nil {
			t.Fatal(err)
		}
	}
	f.run(10e9)
	if n != 300 {
		t.Fatalf("dispatched %d of 300", n)
	}
	t.Logf("%d dispatches: %d booked more than a block off what the rank computes; the arrival cost is off for %d", n, off, offArrival)
	if offArrival < 150 {
		t.Errorf("the arrival cost is off for %d of 300: the control should show the old booking's error", offArrival)
	}
}
