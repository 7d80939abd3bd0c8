package kvindex

import (
	"fmt"
	"slices"
	"testing"

	"fairdispatch/wire"

	"pgregory.net/rapid"
)

// checkDense verifies the dense forms: each names a block with holders, has
// at least denseOff(words) of them, and its bitsets say exactly what the
// holder slice says.
func (x *Index) checkDense(t interface{ Fatalf(string, ...any) }) {
	for h, d := range x.dense {
		hs := x.blocks[h]
		if len(hs) < denseOff(d.words()) {
			t.Fatalf("block %x: dense form of %d words for %d holders", h, d.words(), len(hs))
		}
		want := newDense(d.words())
		for _, e := range hs {
			s := e >> slotShift
			if int(s>>6) >= d.words() {
				t.Fatalf("block %x: slot %d beyond its dense form", h, s)
			}
			x.denseBits(want, int32(s), e&tierMask, true)
		}
		if !slices.Equal(d, want) {
			t.Fatalf("block %x: dense %x, holders say %x", h, d, want)
		}
	}
}

// drawDenseEvent draws an event of worker w for TestModelDense: mostly a
// prefix of the blocks 0..11 stored in one tier (so that many ranks hold the
// same blocks and prefixes end at various places), with removals, partial
// and full clears, and now and then a duplicate, a gap or a new instance;
// when draining, half the events store nothing.
func (g *gen) drawDenseEvent(t *rapid.T, w string, drain bool) *wire.KVEvent {
	ev := &wire.KVEvent{Rank: int32(rapid.IntRange(0, 1).Draw(t, "rank"))}
	g.identify(t, w, ev, 60, 40, func() uint64 { return 1 })
	drawCleared(t, ev)
	if rapid.Bool().Draw(t, "hasRemoved") {
		tt := rapid.IntRange(0, int(wire.NumTiers)-1).Draw(t, "removedTier")
		ev.Removed[tt] = rapid.SliceOfN(rapid.Uint64Range(0, 11), 1, 6).Draw(t, "removed")
	}
	if drain && rapid.Bool().Draw(t, "drainNoStore") {
		return ev
	}
	tt := rapid.IntRange(0, int(wire.NumTiers)-1).Draw(t, "storedTier")
	from := rapid.IntRange(0, 11).Draw(t, "from")
	if rapid.Bool().Draw(t, "fromZero") {
		from = 0
	}
	to := rapid.IntRange(from, 12).Draw(t, "to")
	for h := from; h < to; h++ {
		ev.Stored[tt] = append(ev.Stored[tt], uint64(h))
	}
	return ev
}

// TestModelDense is TestModel with up to 160 ranks storing prefixes of the
// same few blocks, so that blocks gain and lose their dense form and queries
// walk dense blocks, sparse ones, and go from one to the other; the weights
// are drawn among values that are not sums of powers of two, and the
// overlaps must equal the naive model's bit for bit.
func TestModelDense(t *testing.T) {
	var queries, denseQueries, made, dropped int
	rapid.Check(t, func(t *rapid.T) {
		var weights [wire.NumTiers]float64
		for tt := range wire.NumTiers {
			weights[tt] = rapid.SampledFrom([]float64{1, 0.7, 0.3, 0.1, 0.5, 0}).Draw(t, "weight")
		}
		x, m, g := newBoth(t, Config{Weights: weights, MaxBlocks: 1 << 20})
		var out Overlaps
		workers := rapid.SampledFrom([]int{12, 40, 80}).Draw(t, "workers")
		steps := rapid.IntRange(50, 400).Draw(t, "steps")
		for step := range steps {
			drain := step > steps/2 // the second half removes more than it stores
			before := len(x.dense)
			w := fmt.Sprintf("w%d", rapid.IntRange(0, workers-1).Draw(t, "worker"))
			op := rapid.IntRange(0, 29).Draw(t, "op")
			if drain && op >= 20 {
				op = 0 // draining drops workers more often
			}
			switch op {
			case 0, 1:
				dropBoth(x, m, g, w)
			case 2, 3, 4, 5, 6:
				q := make([]uint64, rapid.IntRange(0, 13).Draw(t, "queryLen"))
				for i := range q {
					q[i] = uint64(i)
				}
				if rapid.IntRange(0, 3).Draw(t, "shuffle") == 0 && len(q) > 1 {
					i := rapid.IntRange(0, len(q)-1).Draw(t, "swap")
					q[i] = rapid.Uint64Range(0, 13).Draw(t, "other")
				}
				queries++
				if len(q) > 0 && x.denseFor(q[0], x.blocks[q[0]]) != nil {
					denseQueries++
				}
				want := checkOverlap(t, x, m, q, &out)
				for _, h := range want {
					if got := out.lookup(h.Worker, h.Rank); got != h {
						t.Fatalf("lookup(%s, %d): got %+v, want %+v", h.Worker, h.Rank, got, h)
					}
				}
			default:
				applyBoth(t, x, m, w, g.drawDenseEvent(t, w, drain))
			}
			switch {
			case len(x.dense) > before:
				made++
			case len(x.dense) < before:
				dropped++
			}
			checkBoth(t, x, m)
			x.checkDense(t)
		}
	})
	t.Logf("%d queries, %d from a dense block 0; dense forms made %d times, dropped %d times", queries, denseQueries, made, dropped)
	if denseQueries == 0 || made == 0 || dropped == 0 {
		t.Fatalf("the dense form was not exercised: %d dense queries, made %d, dropped %d", denseQueries, made, dropped)
	}
}

// TestDenseHysteresis walks one block's holders up and down across the
// thresholds: the dense form comes at 16 holders (one word of slots), stays
// down to 8, goes at 7, and comes back only at 16 again.
func TestDenseHysteresis(t *testing.T) {
	x, err := New(Config{Weights: DefaultWeights, MaxBlocks: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]uint64{}
	event := func(w string, removed bool) {
		ids[w]++
		e := &wire.KVEvent{Instance: "a", ID: ids[w]}
		if removed {
			e.Removed[wire.Host] = []uint64{7}
		} else {
			e.Stored[wire.Host] = []uint64{7}
		}
		if _, err := x.Apply(w, e); err != nil {
			t.Fatal(err)
		}
		x.check(t)
		x.checkDense(t)
	}
	want := func(n int, dense bool) {
		t.Helper()
		if got := len(x.blocks[7]); got != n {
			t.Fatalf("%d holders, want %d", got, n)
		}
		if got := x.dense[7] != nil; got != dense {
			t.Fatalf("at %d holders: dense form %v, want %v", n, got, dense)
		}
	}
	for i := range 16 {
		event(fmt.Sprintf("w%d", i), false)
		want(i+1, i+1 >= 16)
	}
	for i := 15; i >= 7; i-- {
		event(fmt.Sprintf("w%d", i), true)
		want(i, i >= 8)
	}
	for i := 7; i < 16; i++ {
		event(fmt.Sprintf("w%d", i), false)
		want(i+1, i+1 >= 16)
	}
	var o Overlaps
	x.Overlap([]uint64{7}, &o)
	if len(o.Hits) != 16 || o.Hits[0].Blocks != 1 || o.Hits[0].Weighted != DefaultWeights[wire.Host] {
		t.Fatalf("hits %+v, want 16 of one host block", o.Hits)
	}
}
