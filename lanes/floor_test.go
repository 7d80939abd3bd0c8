package lanes

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/request"
)

// tr returns an unqueued FCFS request of key, strict tier and cost.
func tr(id, key string, seq uint64, tier uint32, cost uint64) *request.Snapshot {
	r := kr(id, key, seq, cost)
	r.Strict = tier
	return r
}

// popAll pops every dispatchable candidate, checking the invariants after
// each, and returns their ids.
func popAll(t *testing.T, c *Keyed) []string {
	t.Helper()
	var got []string
	for {
		id := popID(t, c)
		if id == "" {
			return got
		}
		got = append(got, id)
	}
}

// floorOf returns key name's floor of tier, or nil.
func floorOf(c *Keyed, name string, tier uint32) *floor {
	k := c.byName[name]
	if k == nil {
		return nil
	}
	for i, f := range k.floorList() {
		if f.tier == tier {
			return &k.x.floors[i]
		}
	}
	return nil
}

// TestFloorOrder: with share 0.5 every dispatch of tier 1 owes tier 0 as
// much, so the two alternate; once tier 1 is empty tier 0 goes on alone.
// With share 0.2, tier 0 goes once every four tier 1 dispatches.
func TestFloorOrder(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  string
	}{
		{0.5, "[h1 l1 h2 l2 h3 l3 h4 l4 l5]"},
		{0.2, "[h1 l1 h2 h3 h4 h5 l2 h6 l3 l4 l5]"},
	} {
		t.Run(fmt.Sprint(tc.share), func(t *testing.T) {
			c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: tc.share}})
			var seq uint64
			for i := range 6 {
				seq++
				if tc.share == 0.2 || i < 4 {
					c.Push(tr(fmt.Sprint("h", i+1), "k", seq, 1, 10))
				}
				if i < 5 {
					seq++
					c.Push(tr(fmt.Sprint("l", i+1), "k", seq, 0, 10))
				}
			}
			if got := fmt.Sprint(popAll(t, c)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestFloorHigherTier: a floor on a tier above the shared lane's goes first
// by strict order, owed nothing, and keeps no credit.
func TestFloorHigherTier(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{2: 0.5}})
	pushAll(c, tr("s1", "k", 1, 0, 10), tr("f1", "k", 2, 2, 10), tr("s2", "k", 3, 0, 10), tr("f2", "k", 4, 2, 10))
	if got := fmt.Sprint(popID(t, c), " ", popID(t, c)); got != "f1 f2" {
		t.Fatalf("got %s, want f1 f2", got)
	}
	if f := floorOf(c, "k", 2); f == nil || f.credit != 0 {
		t.Fatalf("tier 2's floor: got %+v, want credit 0", f)
	}
	if got := fmt.Sprint(popAll(t, c)); got != "[s1 s2]" {
		t.Fatalf("got %s, want [s1 s2]", got)
	}
}

// TestFloorEmptyKeepsNoCredit: the credit a tier earned while backlogged is
// not kept once it empties, by removal as by dispatch: a request of the tier
// arriving later waits for new credit.
func TestFloorEmptyKeepsNoCredit(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: 0.5}})
	l1 := tr("l1", "k", 2, 0, 10)
	pushAll(c, tr("h1", "k", 1, 1, 10), l1, tr("h2", "k", 3, 1, 10), tr("h3", "k", 4, 1, 10))
	if id := popID(t, c); id != "h1" {
		t.Fatalf("got %q, want h1", id)
	}
	if f := floorOf(c, "k", 0); f.credit != 10 {
		t.Fatalf("tier 0 after h1: got credit %v, want 10", f.credit)
	}
	c.Remove(l1)
	if f := floorOf(c, "k", 0); f.credit != 0 {
		t.Fatalf("tier 0 emptied: got credit %v, want 0", f.credit)
	}
	c.Push(tr("l2", "k", 5, 0, 10))
	if got := fmt.Sprint(popAll(t, c)); got != "[h2 l2 h3]" {
		t.Fatalf("got %s, want [h2 l2 h3] (l2 owed by h2 only)", got)
	}
}

// floorRun serves one key with tiers 0 (floored at share) and 1 for steps
// dispatches, keeping depth[tier] requests of each queued (refilled before
// every Candidate, so that both stay backlogged), each of a cost drawn by
// cost. After every dispatch tier 0's service S0 must stay within cmax of
// share / (1 - share) × S1 (docs/design.md, Tier floors: the floor, less
// one request). It returns S0 and S1.
func floorRun(t *rapid.T, share float64, depth [2]int, cost func() uint64, cmax uint64, steps int) [2]float64 {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: share}})
	queued := [2]int{}
	served := [2]float64{}
	var seq uint64
	for range steps {
		for tier := range depth {
			for ; queued[tier] < depth[tier]; queued[tier]++ {
				seq++
				c.Push(tr(fmt.Sprint(seq), "k", seq, uint32(tier), cost()))
			}
		}
		if _, ok := c.Candidate(); !ok {
			t.Fatal("nothing dispatchable")
		}
		c.Pop()
		r := c.Last()
		queued[r.Strict]--
		served[r.Strict] += float64(r.Cost)
		if gap := share/(1-share)*served[1] - served[0]; math.Abs(gap) > float64(cmax)+1e-6 {
			t.Fatalf("S0 %v, S1 %v: tier 0 is %v from its due share/(1-share)*S1, more than one request (%d)", served[0], served[1], gap, cmax)
		}
	}
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
	return served
}

// TestFloorShare is the floor's bound on random shares and costs, both tiers
// two deep; so tier 0's share of the key's service is share within
// cmax / total.
func TestFloorShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		share := rapid.Float64Range(0.01, 0.5).Draw(t, "share")
		cmax := rapid.Uint64Range(1, 500).Draw(t, "cmax")
		cost := func() uint64 { return rapid.Uint64Range(1, cmax).Draw(t, "cost") }
		served := floorRun(t, share, [2]int{2, 2}, cost, cmax, rapid.IntRange(1, 300).Draw(t, "steps"))
		total := served[0] + served[1]
		if got := served[0] / total; math.Abs(got-share) > float64(cmax)/total+1e-9 {
			t.Fatalf("tier 0 got %.4f of %v, want %.4f within %v", got, total, share, float64(cmax)/total)
		}
	})
}

// TestFloorShareMeasured: the share a 0.1 floor gets under a saturating
// tier 1 (mixed costs 50 to 450, as in scheduler's TestTierFloor), and the
// negative control without a floor, which gets nothing.
func TestFloorShareMeasured(t *testing.T) {
	for _, tc := range []struct {
		share, lo, hi float64
	}{{0.1, 0.098, 0.102}, {0.3, 0.298, 0.302}, {0, 0, 0}} {
		cfg := KeyConfig{}
		if tc.share > 0 {
			cfg.MinShare = map[uint32]float64{0: tc.share}
		}
		c := NewKeyed(always{}, cfg)
		queued := [2]int{}
		served := [2]float64{}
		var seq uint64
		for range 20000 {
			for tier := range uint32(2) {
				for ; queued[tier] < 30; queued[tier]++ {
					seq++
					c.Push(tr(fmt.Sprint(seq), "k", seq, tier, 50+100*(seq%5)))
				}
			}
			c.Candidate()
			c.Pop()
			queued[c.Last().Strict]--
			served[c.Last().Strict] += float64(c.Last().Cost)
		}
		got := served[0] / (served[0] + served[1])
		t.Logf("min_share %g: tier 0 got %.4f", tc.share, got)
		if got < tc.lo || got > tc.hi {
			t.Errorf("min_share %g: tier 0 got %.4f, want [%g, %g]", tc.share, got, tc.lo, tc.hi)
		}
	}
}

// TestFloorBlocked: a key whose only requests are floor heads that cannot
// go leaves the key heap for floorBlocked; it comes back when the first such
// head can go (probed at each Candidate) or at a recheck; an owed floor head
// that cannot go does not hold up its key's higher tiers.
func TestFloorBlocked(t *testing.T) {
	chk := newFakeCheck()
	c := NewKeyed(chk, KeyConfig{MinShare: map[uint32]float64{0: 0.5}})
	pushAll(c, tr("a1", "a", 1, 0, 10), tr("b1", "b", 2, 0, 10), tr("o1", "o", 3, 1, 10))
	chk.ids["a1"], chk.ids["b1"] = true, true
	if got := fmt.Sprint(popAll(t, c)); got != "[o1]" {
		t.Fatalf("got %s, want [o1]", got)
	}
	if len(c.floorBlocked) != 2 || len(c.keys) != 0 {
		t.Fatalf("got %d floor-blocked keys, %d in the key heap; want 2 and 0", len(c.floorBlocked), len(c.keys))
	}
	// The probe looks at the first key set aside only.
	first := c.floorBlocked[0].name
	other := map[string]string{"a": "b", "b": "a"}[first]
	chk.ids[other+"1"] = false
	if id := popID(t, c); id != "" {
		t.Fatalf("first set-aside key %s still blocked: got %s, want nothing until a recheck", first, id)
	}
	c.Recheck("any")
	if id := popID(t, c); id != other+"1" {
		t.Fatalf("after a recheck: got %q, want %s1", id, other)
	}
	c.Settle(other, 0)
	if id := popID(t, c); id != "" || len(c.floorBlocked) != 1 {
		t.Fatalf("got %q and %d floor-blocked, want nothing and %s set aside", id, len(c.floorBlocked), first)
	}
	chk.ids[first+"1"] = false
	if id := popID(t, c); id != first+"1" {
		t.Fatalf("first key's head open: got %q, want %s1 by the probe", id, first)
	}
	// An owed floor head that cannot go: the higher tier goes meanwhile.
	pushAll(c, tr("h1", "k", 10, 1, 10), tr("l1", "k", 11, 0, 10), tr("h2", "k", 12, 1, 10), tr("h3", "k", 13, 1, 10))
	if id := popID(t, c); id != "h1" {
		t.Fatalf("got %q, want h1", id)
	}
	chk.ids["l1"] = true
	if id := popID(t, c); id != "h2" {
		t.Fatalf("owed l1 blocked: got %q, want h2", id)
	}
	chk.ids["l1"] = false
	if id := popID(t, c); id != "l1" {
		t.Fatalf("owed l1 open: got %q, want l1", id)
	}
}

// TestFloorForgetBlocked: a floor-blocked key whose last request is removed
// is forgotten and leaves floorBlocked.
func TestFloorForgetBlocked(t *testing.T) {
	chk := newFakeCheck()
	c := NewKeyed(chk, KeyConfig{MinShare: map[uint32]float64{0: 0.5}})
	a1, a2 := tr("a1", "a", 1, 0, 10), tr("a2", "a", 2, 0, 10)
	pushAll(c, a1, a2)
	chk.ids["a1"] = true
	if id := popID(t, c); id != "" || len(c.floorBlocked) != 1 {
		t.Fatalf("got %q, %d floor-blocked; want nothing, 1", id, len(c.floorBlocked))
	}
	c.Remove(a2) // not the head: a stays set aside
	if len(c.floorBlocked) != 1 || c.Keys() != 1 {
		t.Fatalf("got %d floor-blocked, %d keys; want 1 1", len(c.floorBlocked), c.Keys())
	}
	c.Remove(a1)
	if len(c.floorBlocked) != 0 || c.Keys() != 0 || c.Len() != 0 {
		t.Fatalf("got %d floor-blocked, %d keys, %d queued; want 0 0 0", len(c.floorBlocked), c.Keys(), c.Len())
	}
	// A key back after being forgotten has fresh floors.
	c.Push(tr("a3", "a", 3, 0, 10))
	if f := floorOf(c, "a", 0); f == nil || f.credit != 0 || len(f.q) != 1 {
		t.Fatalf("a back: got floor %+v, want a fresh one holding a3", f)
	}
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestFloorPolicyChange: floors are created per configured tier, highest
// first; a tier whose floor a policy change removes queues new requests in
// the shared lane, while those already in the floor are still served, by
// the floor's rule.
func TestFloorPolicyChange(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: 0.1, 1: 0.2}})
	pushAll(c, tr("t0a", "k", 1, 0, 10), tr("t1a", "k", 2, 1, 10), tr("t2a", "k", 3, 2, 10))
	k := c.byName["k"]
	var tiers []uint32
	for _, f := range k.floorList() {
		tiers = append(tiers, f.tier)
	}
	if fmt.Sprint(tiers) != "[1 0]" || len(k.shared) != 1 {
		t.Fatalf("got floors %v and %d shared, want [1 0] and t2a shared", tiers, len(k.shared))
	}
	c.SetKeyConfig(KeyConfig{MinShare: map[uint32]float64{1: 0.2}})
	t0b := tr("t0b", "k", 4, 0, 10)
	c.Push(t0b)
	if !slices.Contains(k.shared, t0b) {
		t.Fatal("tier 0's floor removed: t0b not in the shared lane")
	}
	c.SetKeyConfig(KeyConfig{})
	c.Push(tr("t1b", "k", 5, 1, 10))
	if len(k.shared) != 3 {
		t.Fatalf("no floors: got %d shared, want t2a t0b t1b", len(k.shared))
	}
	// The requests still in the old floors keep their floor's share until
	// served: t2a's dispatch owes tier 0's floor, whose t0a then goes ahead
	// of tier 1; the shared lane's t0b waits in strict order.
	if got := fmt.Sprint(popAll(t, c)); got != "[t2a t0a t1a t1b t0b]" {
		t.Fatalf("got %s, want [t2a t0a t1a t1b t0b]", got)
	}
}

// TestEachWithFloors: Each visits floor requests too and stops when told;
// EachKey stops when told.
func TestEachWithFloors(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: 0.5}})
	pushAll(c, tr("f1", "a", 1, 0, 10), tr("f2", "a", 2, 0, 10), tr("s1", "a", 3, 1, 10), tr("g1", "b", 4, 0, 10))
	var all []string
	c.Each(func(r *request.Snapshot) bool { all = append(all, r.ID); return true })
	slices.Sort(all)
	if fmt.Sprint(all) != "[f1 f2 g1 s1]" {
		t.Fatalf("Each: got %v, want [f1 f2 g1 s1]", all)
	}
	for stop := 1; stop <= 4; stop++ {
		n := 0
		c.Each(func(*request.Snapshot) bool { n++; return n < stop })
		if n != stop {
			t.Fatalf("Each told to stop at %d: got %d calls", stop, n)
		}
	}
	n := 0
	c.EachKey(func(string, float64, float64, int) bool { n++; return false })
	if n != 1 {
		t.Fatalf("EachKey told to stop: got %d calls, want 1", n)
	}
}

// TestFloorOwedOverHigherTiersOnly: an owed floor head goes before the
// key's higher tiers only; against a request of its own tier (here a
// pinned one, which floors do not hold) it competes by order.
func TestFloorOwedOverHigherTiersOnly(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: 0.5}})
	p1 := tr("p1", "k", 2, 0, 10)
	p1.Pin = pin("w", request.AnyRank)
	pushAll(c, tr("h1", "k", 1, 1, 10), p1, tr("l1", "k", 3, 0, 10))
	if got := fmt.Sprint(popAll(t, c)); got != "[h1 p1 l1]" {
		t.Fatalf("got %s, want [h1 p1 l1]: l1 is owed but p1, of its tier, is earlier", got)
	}
}

// TestFloorShareOneDeep: a floored tier whose requests come one at a time
// (its next queued right after each dispatch) under a saturating tier 1
// still gets its share: the dispatch that empties the floor pays its cost
// out of the credit that owed it, and only what is left is forfeited. Equal
// costs, so that nothing is left to forfeit: S0 stays within one request of
// share / (1 - share) × S1.
func TestFloorShareOneDeep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		share := rapid.Float64Range(0.01, 0.5).Draw(t, "share")
		cost := rapid.Uint64Range(1, 500).Draw(t, "cost")
		floorRun(t, share, [2]int{1, 3}, func() uint64 { return cost }, cost, rapid.IntRange(1, 300).Draw(t, "steps"))
	})
}
