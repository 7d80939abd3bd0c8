package kvindex

import (
	"maps"
	"math/rand/v2"
	"testing"

	"fairdispatch/wire"
)

// TestCompaction churns one rank's blocks (stores, removals, re-stores of
// removed blocks, partial clears) over a universe large enough for the lazy
// list to pass its bound many times, and checks the invariants (the list's
// bound among them) and the holdings against a plain map after every event.
func TestCompaction(t *testing.T) {
	x, err := New(Config{Weights: DefaultWeights, MaxBlocks: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[uint64]wire.Tiers{}
	other := &wire.KVEvent{Instance: "o", ID: 1}
	other.Stored[wire.Host] = []uint64{1, 2, 3} // another rank sharing some blocks
	if _, err := x.Apply("other", other); err != nil {
		t.Fatal(err)
	}
	compactions := 0
	for id := uint64(1); id <= 2000; id++ {
		ev := &wire.KVEvent{Instance: "a", ID: id}
		for range rng.IntN(40) {
			h, tier := uint64(rng.IntN(300)), wire.Tier(rng.IntN(int(wire.NumTiers)))
			if rng.IntN(2) == 0 {
				ev.Stored[tier] = append(ev.Stored[tier], h)
			} else {
				ev.Removed[tier] = append(ev.Removed[tier], h)
			}
		}
		if rng.IntN(400) == 0 {
			ev.Cleared = wire.Tiers(1 + rng.IntN(int(wire.AllTiers)-1)) // partial
		}
		before := len(x.slots[x.bySlot[slotKey{"a", 0}]].list)
		if _, err := x.Apply("a", ev); err != nil {
			t.Fatal(err)
		}
		for h, ts := range want {
			if ts &^= ev.Cleared; ts == 0 {
				delete(want, h)
			} else {
				want[h] = ts
			}
		}
		for tier := range wire.NumTiers {
			for _, h := range ev.Removed[tier] {
				if ts := want[h] &^ (1 << tier); ts == 0 {
					delete(want, h)
				} else {
					want[h] = ts
				}
			}
		}
		for tier := range wire.NumTiers {
			for _, h := range ev.Stored[tier] {
				want[h] |= 1 << tier
			}
		}
		if after := len(x.slots[x.bySlot[slotKey{"a", 0}]].list); after < before {
			compactions++
		}
		x.check(t)
		if got := x.holdings("a", 0); !maps.Equal(got, want) {
			t.Fatalf("event %d: holdings differ: got %d blocks, want %d", id, len(got), len(want))
		}
	}
	if compactions == 0 {
		t.Fatal("the list was never compacted: the test does not exercise compaction")
	}
	if got := x.holdings("other", 0); len(got) != 3 {
		t.Fatalf("the other rank holds %v, want its 3 blocks", got)
	}
}
