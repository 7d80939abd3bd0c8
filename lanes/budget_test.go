package lanes

import (
	"fmt"
	"math"
	"testing"

	"fairdispatch/request"
)

// t0 is the time of the budget tests, in Unix ns: far enough from 0 that
// PruneBudgets's first run is not special.
const t0 = int64(10e9)

// kr returns an unqueued FCFS request of key and cost.
func kr(id, key string, seq, cost uint64) *request.Snapshot {
	r := mk(id, seq, 0, -float64(seq), shared)
	r.Key, r.Cost = key, cost
	return r
}

// pushAll queues rs in order.
func pushAll(c *Keyed, rs ...*request.Snapshot) {
	for _, r := range rs {
		c.Push(r)
	}
}

// popID pops the candidate and returns its id, "" when there is none.
func popID(t *testing.T, c *Keyed) string {
	t.Helper()
	if _, ok := c.Candidate(); !ok {
		return ""
	}
	c.Pop()
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
	return c.Last().ID
}

// level returns key name's budget level at now and whether it waits for it.
func level(t *testing.T, c *Keyed, now int64, name string) (float64, bool) {
	t.Helper()
	l, _, _, thr, ok := c.BudgetLevel(now, name)
	if !ok {
		t.Fatalf("key %s: no budget", name)
	}
	return l, thr
}

// extInvariants checks what budgets and floors add to keyedInvariants's
// picture: the throttled heap's order and positions, a key is throttled
// exactly when it is in that heap (and then out of the key heap), a key out
// of the key heap and not throttled has no open lane and, when its floors
// hold requests, is in floorBlocked; and the queued cost of every budget.
func extInvariants(c *Keyed) error {
	for i, b := range c.throttled {
		if b.tpos != i {
			return fmt.Errorf("throttled heap: %s at %d has tpos %d", b.name, i, b.tpos)
		}
		if p := (i - 1) / 2; i > 0 && b.ready < c.throttled[p].ready {
			return fmt.Errorf("throttled heap: %s ranks before its parent", b.name)
		}
		if b.key == nil || !b.key.thr || b.key.budget() != b || c.byName[b.name] != b.key {
			return fmt.Errorf("throttled heap: %s holds no throttled tracked key", b.name)
		}
	}
	for i, e := range c.keys {
		if int(e.k.pos) != i || e.v != e.k.v {
			return fmt.Errorf("key heap: %s at %d has pos %d", e.k.name, i, e.k.pos)
		}
	}
	fb := 0
	n := 0
	for name, k := range c.byName {
		open := len(k.ready) > 0 || (len(k.shared) > 0 && k.sblock == sOpen)
		floors := k.x != nil && floorsQueued(k)
		switch {
		case k.thr && (k.pos >= 0 || k.budget() == nil || k.budget().tpos < 0):
			return fmt.Errorf("key %s: throttled but in the key heap or not in the throttled heap", name)
		case !k.thr && k.budget() != nil && k.budget().tpos >= 0:
			return fmt.Errorf("key %s: in the throttled heap, not marked", name)
		case k.pos >= 0 && !open && !floors:
			return fmt.Errorf("key %s: in the key heap with nothing open", name)
		case k.pos < 0 && !k.thr && open:
			return fmt.Errorf("key %s: out of the key heap with an open lane", name)
		case k.pos < 0 && !k.thr && floors && !k.fblk:
			return fmt.Errorf("key %s: out of every heap with floor requests", name)
		}
		if k.fblk {
			fb++
		}
		if k.n == 0 && k.owed == 0 {
			return fmt.Errorf("key %s kept with nothing queued or owed", name)
		}
		if b := k.budget(); b != nil {
			if c.buckets[name] != b || b.key != k {
				return fmt.Errorf("key %s: budget state not filed", name)
			}
		}
		m := len(k.shared)
		for _, f := range k.floorList() {
			m += len(f.q)
			for i, r := range f.q {
				if r.Index != i || r.Strict != f.tier {
					return fmt.Errorf("key %s: floor %d holds %s (tier %d) at %d, Index %d", name, f.tier, r.ID, r.Strict, i, r.Index)
				}
			}
		}
		n += m
	}
	for _, l := range c.pinned {
		n += len(l.q)
	}
	if n != c.n {
		return fmt.Errorf("got n %d, counted %d", c.n, n)
	}
	if fb != len(c.floorBlocked) {
		return fmt.Errorf("%d keys marked floor-blocked, %d listed", fb, len(c.floorBlocked))
	}
	for name, b := range c.buckets {
		if b.key == nil && c.byName[name] != nil && c.byName[name].budget() == b {
			return fmt.Errorf("bucket %s: key tracked but not linked", name)
		}
	}
	return nil
}

// TestBucketLevel: a bucket refills at its rate up to its burst, charges
// take from it down to minLevel, refunds give back up to the burst, and wait
// is the time its level takes to reach a need.
func TestBucketLevel(t *testing.T) {
	b := newBucket("a", &Budget{Rate: 1000, Burst: 500}, t0)
	if got := b.levelAt(t0); got != 500 {
		t.Fatalf("new bucket: got level %v, want 500 (full)", got)
	}
	b.charge(t0, 400)
	for _, tc := range []struct {
		at   int64
		want float64
	}{
		{t0 - 1e9, 100}, // before at: the level at at
		{t0, 100},
		{t0 + 1e8, 200},  // 1000/s for 0.1 s
		{t0 + 25e7, 350}, // 0.25 s
		{t0 + 4e8, 500},  // full
		{t0 + 10e9, 500}, // capped by the burst
		{t0 + 1e6, 101},  // 1 ms
		{t0 + 1e3, 100.001},
	} {
		if got := b.levelAt(tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("level at t0%+d ns: got %v, want %v", tc.at-t0, got, tc.want)
		}
	}
	if w := b.wait(t0, 350); w != 25e7 {
		t.Errorf("wait for 350 from 100 at 1000/s: got %d ns, want 250 ms", w)
	}
	if w := b.wait(t0, 100); w != 0 {
		t.Errorf("wait for the level there is: got %d, want 0", w)
	}
	if w := b.wait(t0+1e8, 350); w != 15e7 {
		t.Errorf("wait for 350 from 200: got %d ns, want 150 ms", w)
	}
	if got, want := b.needFor(300), 300.0; got != want {
		t.Errorf("needFor(300): got %v, want %v", got, want)
	}
	if got, want := b.needFor(800), 500.0; got != want {
		t.Errorf("needFor(800) of a 500 burst: got %v, want the burst %v", got, want)
	}
	// A charge at a later time first refills.
	b.charge(t0+1e8, 300)
	if got := b.levelAt(t0 + 1e8); got != -100 {
		t.Errorf("after a charge of 300 at level 200: got %v, want -100", got)
	}
	b.charge(t0+1e8, -1e6)
	if got := b.levelAt(t0 + 1e8); got != 500 {
		t.Errorf("a refund beyond the burst: got %v, want the burst 500", got)
	}
	b.charge(t0+1e8, 1e15)
	if got := b.levelAt(t0 + 1e8); got != minLevel {
		t.Errorf("a huge charge: got %v, want the debt floor %v", got, float64(minLevel))
	}
	// A rate too slow to refill in any horizon: the wait is bounded.
	s := newBucket("s", &Budget{Rate: 1e-12, Burst: 10}, t0)
	s.charge(t0, 10)
	if w := s.wait(t0, 10); w != math.MaxInt64/4 {
		t.Errorf("wait at 1e-12/s: got %d, want the bound %d", w, int64(math.MaxInt64/4))
	}
	// set keeps the level refilled so far, capped by the new burst.
	b = newBucket("a", &Budget{Rate: 1000, Burst: 500}, t0)
	b.charge(t0, 400)
	b.set(&Budget{Rate: 2000, Burst: 150, WorkConserving: true}, t0+1e8)
	if b.levelAt(t0+1e8) != 150 || b.rate != 2000 || b.burst != 150 || !b.conserve {
		t.Errorf("set to 2000/s burst 150 at level 200: got level %v rate %v burst %v conserve %v",
			b.levelAt(t0+1e8), b.rate, b.burst, b.conserve)
	}
	b.set(&Budget{Rate: 2000, Burst: 1000}, t0+1e8)
	if got := b.levelAt(t0 + 2e8); got != 350 {
		t.Errorf("set to burst 1000 at level 150, 0.1 s later at 2000/s: got %v, want 350", got)
	}
}

// budgetedAB is a class where key a has a budget of 1000 cost units a
// second, burst 500, and every other key none.
func budgetedAB(chk Checker, wc bool) *Keyed {
	c := NewKeyed(chk, KeyConfig{Budgets: map[string]*Budget{"a": {Rate: 1000, Burst: 500, WorkConserving: wc}}})
	c.SetNow(t0)
	return c
}

// TestBudgetThrottle: a key over budget takes no turn, whatever its
// standing, until NextReady; the others go on meanwhile; at NextReady it is
// served, and its level and the class's charged total follow the dispatches.
func TestBudgetThrottle(t *testing.T) {
	c := budgetedAB(always{}, false)
	if !c.Budgeted() || NewKeyed(always{}, KeyConfig{}).Budgeted() {
		t.Fatal("Budgeted: want true with a budget, false without")
	}
	pushAll(c, kr("a1", "a", 1, 300), kr("a2", "a", 2, 300),
		kr("b1", "b", 3, 300), kr("b2", "b", 4, 300), kr("b3", "b", 5, 300))
	var got []string
	for range 5 {
		if id := popID(t, c); id != "" {
			got = append(got, id)
		}
	}
	// a1 (level 500 -> 200), b1, then a's turn: a2 needs 300, a has 200.
	if want := "[a1 b1 b2 b3]"; fmt.Sprint(got) != want {
		t.Fatalf("got order %v, want %v (a throttled after a1)", got, want)
	}
	if l, thr := level(t, c, t0, "a"); l != 200 || !thr {
		t.Fatalf("a: got level %v throttled %v, want 200 and throttled", l, thr)
	}
	va, _ := c.Service("a")
	vb, _ := c.Service("b")
	if va >= vb {
		t.Fatalf("a's standing %v, b's %v: want a ahead, so that only its budget held it", va, vb)
	}
	if c.Throttled() != 1 {
		t.Fatalf("got %d throttled keys, want 1", c.Throttled())
	}
	ready := t0 + 1e8 // 100 more at 1000/s
	if got := c.NextReady(); got != ready {
		t.Fatalf("NextReady: got t0%+d, want t0+100ms", got-t0)
	}
	c.SetNow(ready - 1)
	if id := popID(t, c); id != "" {
		t.Fatalf("1 ns before NextReady: got %s, want nothing", id)
	}
	c.SetNow(ready - 2e8) // time never goes back
	c.SetNow(ready)
	if id := popID(t, c); id != "a2" {
		t.Fatalf("at NextReady: got %q, want a2", id)
	}
	if c.Throttled() != 0 || c.NextReady() != 0 {
		t.Fatalf("after a2: got %d throttled, NextReady %d; want 0, 0", c.Throttled(), c.NextReady())
	}
	if l, thr := level(t, c, ready, "a"); l != 0 || thr {
		t.Fatalf("a after a2: got level %v throttled %v, want 0, not throttled", l, thr)
	}
	if got := c.BudgetCharged(); got != 600 {
		t.Fatalf("BudgetCharged: got %v, want 600 (a's two dispatches only)", got)
	}
}

// TestBudgetLargerThanBurst: a request costing more than the burst needs the
// whole burst (not its cost, which the level never reaches) and leaves the
// key in debt.
func TestBudgetLargerThanBurst(t *testing.T) {
	c := budgetedAB(always{}, false)
	pushAll(c, kr("a1", "a", 1, 800), kr("a2", "a", 2, 800))
	if id := popID(t, c); id != "a1" {
		t.Fatalf("full bucket: got %q, want a1", id)
	}
	if l, _ := level(t, c, t0, "a"); l != -300 {
		t.Fatalf("after 800 from 500: got level %v, want -300", l)
	}
	if id := popID(t, c); id != "" {
		t.Fatalf("in debt: got %s, want nothing", id)
	}
	if got, want := c.NextReady(), t0+8e8; got != want { // 800 units at 1000/s to the burst
		t.Fatalf("NextReady: got t0%+d, want t0+800ms", got-t0)
	}
	c.SetNow(t0 + 8e8)
	if id := popID(t, c); id != "a2" {
		t.Fatalf("burst refilled: got %q, want a2", id)
	}
}

// TestBudgetWait: the wait BudgetWait projects is the time the level takes
// to pay for the key's queued requests and then the new one (capped by the
// burst); 0 when it already does; ok false without a budget.
func TestBudgetWait(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{
		Budgets:       map[string]*Budget{"a": {Rate: 1000, Burst: 500}, "free": nil},
		DefaultBudget: &Budget{Rate: 1e-12, Burst: 1, WorkConserving: true},
	})
	c.SetNow(t0)
	if _, _, ok := c.BudgetWait(t0, "free", 100); ok {
		t.Fatal("a key listed as unlimited: want ok false")
	}
	check := func(name string, now int64, cost uint64, want int64) {
		t.Helper()
		w, _, ok := c.BudgetWait(now, name, cost)
		if !ok || w != want {
			t.Fatalf("BudgetWait(t0%+d, %s, %d): got %d ok %v, want %d", now-t0, name, cost, w, ok, want)
		}
	}
	check("a", t0, 500, 0) // untracked: a full bucket
	check("a", t0, 900, 0) // capped by the burst
	pushAll(c, kr("a1", "a", 1, 300), kr("a2", "a", 2, 300))
	check("a", t0, 100, 2e8) // 600 queued + 100, level 500
	check("a", t0, 900, 6e8) // 600 queued + the burst
	if id := popID(t, c); id != "a1" {
		t.Fatalf("got %q, want a1", id)
	}
	check("a", t0, 100, 2e8)     // 300 queued + 100, level 200
	check("a", t0+1e8, 100, 1e8) // level 300
	check("a", t0+3e8, 100, 0)   // level 500
	_, conserving, _ := c.BudgetWait(t0, "a", 1)
	if conserving {
		t.Fatal("a's budget is not work-conserving")
	}
	// The default budget, work-conserving, refills too slowly to count.
	c.Push(kr("z1", "z", 3, 1))
	w, conserving, ok := c.BudgetWait(t0, "z", 1)
	if !ok || !conserving || w < math.MaxInt64/4 || w > math.MaxInt64/4+1 {
		t.Fatalf("z: got wait %d conserving %v ok %v, want the bound (MaxInt64/4), true, true", w, conserving, ok)
	}
}

// TestBudgetLevel: an untracked key with a budget reads full; a key without
// one reads not ok.
func TestBudgetLevel(t *testing.T) {
	c := budgetedAB(always{}, false)
	if _, _, _, _, ok := c.BudgetLevel(t0, "b"); ok {
		t.Fatal("key b has no budget: want ok false")
	}
	l, rate, burst, thr, ok := c.BudgetLevel(t0, "a")
	if !ok || l != 500 || rate != 1000 || burst != 500 || thr {
		t.Fatalf("untracked a: got %v %v %v %v %v, want 500 1000 500 false true", l, rate, burst, thr, ok)
	}
	c.Push(kr("a1", "a", 1, 100))
	popID(t, c)
	if l, _ := level(t, c, t0+5e7, "a"); l != 450 {
		t.Fatalf("a 50 ms after a dispatch of 100: got %v, want 450", l)
	}
}

// throttledA returns a class whose key a (1000/s, burst 500) has been served
// a1 (300) and waits for 300 with 200, a2 queued; a's dispatch is settled.
func throttledA(t *testing.T, chk Checker, wc bool) *Keyed {
	t.Helper()
	c := budgetedAB(chk, wc)
	pushAll(c, kr("a1", "a", 1, 300), kr("a2", "a", 2, 300))
	if id := popID(t, c); id != "a1" {
		t.Fatalf("got %q, want a1", id)
	}
	c.Settle("a", 0)
	if id := popID(t, c); id != "" || c.Throttled() != 1 || c.NextReady() != t0+1e8 {
		t.Fatalf("got %q, %d throttled, NextReady t0%+d; want a throttled until t0+100ms", id, c.Throttled(), c.NextReady()-t0)
	}
	return c
}

// TestChargeBudget: a settlement correction moves the level, and a
// throttled key's NextReady with it; refunds are not subtracted from the
// charged total; a key without budget state is refused.
func TestChargeBudget(t *testing.T) {
	c := throttledA(t, always{}, false)
	if c.ChargeBudget(t0, "b", 10) || c.ChargeBudget(t0, "nobody", 10) {
		t.Fatal("ChargeBudget of a key without budget state: want false")
	}
	if !c.ChargeBudget(t0, "a", 100) {
		t.Fatal("ChargeBudget(a): want true")
	}
	if l, _ := level(t, c, t0, "a"); l != 100 {
		t.Fatalf("after a correction of 100: got level %v, want 100", l)
	}
	if got := c.NextReady(); got != t0+2e8 {
		t.Fatalf("NextReady after a correction of 100: got t0%+d, want t0+200ms", got-t0)
	}
	if got := c.BudgetCharged(); got != 400 {
		t.Fatalf("BudgetCharged: got %v, want 300 + 100", got)
	}
	c.ChargeBudget(t0+5e7, "a", -250) // level 150 + 250 = 400 at t0+50ms
	if got := c.NextReady(); got != t0+5e7 {
		t.Fatalf("NextReady after a refund covering a2: got t0%+d, want t0+50ms (now)", got-t0)
	}
	if got := c.BudgetCharged(); got != 400 {
		t.Fatalf("BudgetCharged after a refund: got %v, want 400 unchanged", got)
	}
	c.SetNow(t0 + 5e7)
	if id := popID(t, c); id != "a2" {
		t.Fatalf("after the refund: got %q, want a2", id)
	}
}

// TestBudgetWorkConserving: a work-conserving key over budget is served
// only in the second pass (SetConserve) and only when no key within budget
// has a dispatchable request; such a dispatch is charged to its standing,
// not to its budget, and LastFree says so.
func TestBudgetWorkConserving(t *testing.T) {
	chk := newFakeCheck()
	c := throttledA(t, chk, true)
	w := pin("w", request.AnyRank)
	b2 := kr("b2", "b", 4, 100)
	b2.Pin = w
	pushAll(c, kr("b1", "b", 3, 100), b2)
	c.SetConserve(true)
	if id := popID(t, c); id != "b1" || c.LastFree() {
		t.Fatalf("second pass with b backlogged: got %q (free %v), want b1 charged", id, c.LastFree())
	}
	chk.targets[w] = true // b wants service but its worker cannot take it
	c.SetConserve(false)
	if id := popID(t, c); id != "" {
		t.Fatalf("first pass, a throttled, b blocked: got %s, want nothing", id)
	}
	if !c.Conserving() {
		t.Fatal("Conserving: want true (a is throttled and work-conserving)")
	}
	va, _ := c.Service("a")
	c.SetConserve(true)
	if id := popID(t, c); id != "a2" || !c.LastFree() {
		t.Fatalf("second pass: got %q (free %v), want a2 free", id, c.LastFree())
	}
	c.SetConserve(false)
	if l, _ := level(t, c, t0, "a"); l != 200 {
		t.Fatalf("a after a free dispatch: got level %v, want 200 unchanged", l)
	}
	if got := c.BudgetCharged(); got != 300 {
		t.Fatalf("BudgetCharged: got %v, want 300 (a1 only)", got)
	}
	if v, _ := c.Service("a"); v != va+300 {
		t.Fatalf("a's standing: got %v, want %v + 300 (the free dispatch counts for fairness)", v, va)
	}
	// With nothing left that a work-conserving key could send (the class
	// gate is closed), the second pass finds nothing.
	c.Push(kr("a3", "a", 5, 300)) // over the level 200
	chk.targets[shared] = true
	c.SetConserve(true)
	if id := popID(t, c); id != "" {
		t.Fatalf("a3 not dispatchable: got %s, want nothing", id)
	}
	chk.targets[shared] = false
	if id := popID(t, c); id != "a3" || !c.LastFree() {
		t.Fatalf("got %q (free %v), want a3 free", id, c.LastFree())
	}
}

// TestBudgetNotConserving: a budget that is not work-conserving is never
// served over it, even in the second pass, beside a conserving one that is.
func TestBudgetNotConserving(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{Budgets: map[string]*Budget{
		"n": {Rate: 1000, Burst: 100},
		"w": {Rate: 1000, Burst: 100, WorkConserving: true},
	}})
	c.SetNow(t0)
	pushAll(c, kr("n1", "n", 1, 100), kr("n2", "n", 2, 100), kr("w1", "w", 3, 100), kr("w2", "w", 4, 100))
	if a, b := popID(t, c), popID(t, c); a != "n1" || b != "w1" {
		t.Fatalf("got %s %s, want n1 w1", a, b)
	}
	if id := popID(t, c); id != "" || c.Throttled() != 2 {
		t.Fatalf("got %q and %d throttled, want nothing and 2", id, c.Throttled())
	}
	c.SetConserve(true)
	if id := popID(t, c); id != "w2" {
		t.Fatalf("second pass: got %q, want w2 (n is not work-conserving)", id)
	}
	if id := popID(t, c); id != "" {
		t.Fatalf("second pass, only n left: got %s, want nothing", id)
	}
	c.SetConserve(false)
	c.Settle("w", 0)
	c.Settle("w", 0)
	if c.Conserving() {
		t.Fatal("Conserving with only n throttled: want false")
	}
}

// TestPruneBudgets: the state of a key no longer tracked is kept until its
// bucket has refilled (a key coming back keeps its level), pruned at most
// once a second; a tracked key's state is never pruned.
func TestPruneBudgets(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{DefaultBudget: &Budget{Rate: 1000, Burst: 500}})
	c.PruneBudgets(t0) // nothing to prune: no state, no run
	c.SetNow(t0)
	pushAll(c, kr("a1", "a", 1, 500), kr("b1", "b", 2, 500), kr("b2", "b", 3, 500))
	popID(t, c) // a1
	popID(t, c) // b1
	c.Settle("a", 0)
	if c.Keys() != 1 || len(c.buckets) != 2 {
		t.Fatalf("got %d keys, %d budget states; want b tracked and both states", c.Keys(), len(c.buckets))
	}
	c.PruneBudgets(t0 + 1e8) // a at 100: kept
	if c.buckets["a"] == nil {
		t.Fatal("a's state pruned before it refilled")
	}
	// a comes back 0.2 s later with its level, not a full bucket.
	c.SetNow(t0 + 2e8)
	c.Push(kr("a2", "a", 4, 300))
	if l, _ := level(t, c, t0+2e8, "a"); l != 200 {
		t.Fatalf("a back after 200 ms idle: got level %v, want 200", l)
	}
	if id := popID(t, c); id != "" {
		t.Fatalf("a at 200 needing 300, b throttled: got %s, want nothing", id)
	}
	c.Remove(c.byName["a"].shared[0])
	c.PruneBudgets(t0 + 6e8) // a full, but the last run was 0.5 s ago
	if c.buckets["a"] == nil {
		t.Fatal("PruneBudgets ran twice within a second")
	}
	c.PruneBudgets(t0 + 11e8)
	if c.buckets["a"] != nil {
		t.Fatal("a's full, untracked state not pruned")
	}
	if c.buckets["b"] == nil || c.byName["b"].budget() == nil {
		t.Fatal("tracked b's state pruned")
	}
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestSetBudgetsLive: a policy change applies a key's new rate and burst at
// once, keeping its level capped by the new burst and moving its NextReady;
// a key that loses its budget leaves the throttled heap and is served; a
// tracked key that gains one starts full; an untracked key's state that
// loses its budget is dropped.
func TestSetBudgetsLive(t *testing.T) {
	c := throttledA(t, always{}, false)
	cfg := func(a *Budget, def *Budget) KeyConfig {
		return KeyConfig{Budgets: map[string]*Budget{"a": a}, DefaultBudget: def}
	}
	c.SetKeyConfig(cfg(&Budget{Rate: 2000, Burst: 500}, nil))
	if got := c.NextReady(); got != t0+5e7 {
		t.Fatalf("rate doubled: NextReady t0%+d, want t0+50ms", got-t0)
	}
	c.SetKeyConfig(cfg(&Budget{Rate: 1000, Burst: 150}, nil))
	if l, thr := level(t, c, t0, "a"); l != 150 || !thr {
		t.Fatalf("burst 150: got level %v throttled %v, want 150 and throttled", l, thr)
	}
	// A new key tracked while "b" has no budget; then every key gets one.
	c.Push(kr("b1", "b", 3, 100))
	c.SetKeyConfig(cfg(&Budget{Rate: 1000, Burst: 150}, &Budget{Rate: 10, Burst: 40}))
	if l, _, burst, thr, ok := c.BudgetLevel(t0, "b"); !ok || l != 40 || burst != 40 || thr {
		t.Fatalf("b gains a budget: got level %v burst %v throttled %v ok %v, want a full 40", l, burst, thr, ok)
	}
	// "a" loses its budget: served at once (after b, which has the least
	// service: it started at the class's virtual time, 0).
	c.SetKeyConfig(cfg(nil, &Budget{Rate: 10, Burst: 40}))
	if c.Throttled() != 0 || c.buckets["a"] != nil {
		t.Fatalf("a unlimited: %d throttled, state kept %v; want 0 and dropped", c.Throttled(), c.buckets["a"] != nil)
	}
	if _, _, _, _, ok := c.BudgetLevel(t0, "a"); ok {
		t.Fatal("a unlimited: BudgetLevel ok")
	}
	if got := fmt.Sprint([]string{popID(t, c), popID(t, c)}); got != "[b1 a2]" {
		t.Fatalf("a unlimited: got %s, want b1 a2", got)
	}
	// b, untracked after its dispatch settles, keeps state until the budget goes.
	c.Settle("b", 0)
	if c.buckets["b"] == nil {
		t.Fatal("b's state dropped while it refills")
	}
	c.SetKeyConfig(KeyConfig{})
	if len(c.buckets) != 0 {
		t.Fatalf("no budgets: %d states kept", len(c.buckets))
	}
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetForgetThrottled: a throttled key that loses its last request and
// owes nothing is forgotten and leaves the throttled heap; its state stays
// for when it comes back.
func TestBudgetForgetThrottled(t *testing.T) {
	c := throttledA(t, always{}, false)
	a2 := c.byName["a"].shared[0]
	c.Remove(a2)
	if c.Keys() != 0 || c.Throttled() != 0 || c.NextReady() != 0 {
		t.Fatalf("a forgotten: got %d keys, %d throttled, NextReady %d; want 0 0 0", c.Keys(), c.Throttled(), c.NextReady())
	}
	if b := c.buckets["a"]; b == nil || b.key != nil {
		t.Fatal("a's state: want kept, unlinked from the forgotten key")
	}
	c.SetNow(t0 + 2e8)
	if id := popID(t, c); id != "" {
		t.Fatalf("nothing queued: got %s", id)
	}
	// Back, with its level: 200 + 200.
	a2.Index = -1
	c.Push(a2)
	if l, thr := level(t, c, t0+2e8, "a"); l != 400 || thr {
		t.Fatalf("a back: got level %v throttled %v, want 400, not throttled", l, thr)
	}
	if id := popID(t, c); id != "a2" {
		t.Fatalf("got %q, want a2", id)
	}
	// Throttled with a dispatch owed: removing its request keeps it tracked
	// until the settlement, waiting for nothing.
	c.Push(kr("a3", "a", 5, 300))
	if id := popID(t, c); id != "" || c.Throttled() != 1 {
		t.Fatalf("a at 100 needing 300: got %q and %d throttled", id, c.Throttled())
	}
	c.Remove(c.byName["a"].shared[0])
	if c.Keys() != 1 || c.Throttled() != 0 {
		t.Fatalf("a owed: got %d keys, %d throttled; want 1 0", c.Keys(), c.Throttled())
	}
	c.Settle("a", 0)
	if c.Keys() != 0 || c.Throttled() != 0 {
		t.Fatalf("a settled: got %d keys, %d throttled; want 0 0", c.Keys(), c.Throttled())
	}
	if err := extInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestSetBudgetsBurstBelowNeed: a policy change cutting the burst below what
// a throttled key waits for lowers what it waits for to the new burst (a
// request larger than the burst needs the whole burst): a key whose level
// already is the new burst is served at once, not once its level would have
// reached the old need.
func TestSetBudgetsBurstBelowNeed(t *testing.T) {
	c := throttledA(t, always{}, false) // level 200, waits for 300
	c.SetKeyConfig(KeyConfig{Budgets: map[string]*Budget{"a": {Rate: 1000, Burst: 150}}})
	if got := c.NextReady(); got != t0 {
		t.Fatalf("burst cut to 150 at level 200: NextReady t0%+d, want t0 (now)", got-t0)
	}
	if id := popID(t, c); id != "a2" {
		t.Fatalf("got %q, want a2", id)
	}
	// Level -150: a3 (300) waits for the whole burst of 150, 300 ms. The
	// burst raised to 500 meanwhile, a3 needs its cost: at the 300 ms it is
	// found short and waits again, for the 150 more.
	c.Push(kr("a3", "a", 3, 300))
	if id := popID(t, c); id != "" || c.NextReady() != t0+3e8 {
		t.Fatalf("got %q, NextReady t0%+d; want a3 waiting until t0+300ms", id, c.NextReady()-t0)
	}
	c.SetKeyConfig(KeyConfig{Budgets: map[string]*Budget{"a": {Rate: 1000, Burst: 500}}})
	c.SetNow(t0 + 3e8)
	if id := popID(t, c); id != "" || c.NextReady() != t0+45e7 {
		t.Fatalf("burst 500, level 150: got %q, NextReady t0%+d; want a3 waiting until t0+450ms", id, c.NextReady()-t0)
	}
	c.SetNow(t0 + 45e7)
	if id := popID(t, c); id != "a3" {
		t.Fatalf("level 300: got %q, want a3", id)
	}
}

// TestBudgetRemoveReexamines: a throttled key whose request is removed (an
// expired deadline, a hand-back) is looked at again at the next Candidate:
// its next request may be within its budget, and is then served (charged)
// rather than waiting for the level the removed one needed, or going free
// in the work-conserving pass.
func TestBudgetRemoveReexamines(t *testing.T) {
	for _, wc := range []bool{false, true} {
		t.Run(fmt.Sprint("work_conserving=", wc), func(t *testing.T) {
			c := budgetedAB(always{}, wc)
			big, small := kr("big", "a", 2, 500), kr("small", "a", 3, 100)
			pushAll(c, kr("a1", "a", 1, 300), big, small)
			if id := popID(t, c); id != "a1" {
				t.Fatalf("got %q, want a1", id)
			}
			if id := popID(t, c); id != "" || c.Throttled() != 1 {
				t.Fatalf("got %q, %d throttled; want a waiting for 500 with 200", id, c.Throttled())
			}
			c.Remove(big)
			c.SetConserve(wc)
			if id := popID(t, c); id != "small" || c.LastFree() {
				t.Fatalf("big removed: got %q (free %v), want small, charged", id, c.LastFree())
			}
			if l, _ := level(t, c, t0, "a"); l != 100 {
				t.Fatalf("got level %v, want 100", l)
			}
		})
	}
}

// TestBudgetPushReexamines: a new head queued at a throttled key (here of a
// higher strict tier, and cheap) is looked at at the next Candidate, and
// served if the level covers it.
func TestBudgetPushReexamines(t *testing.T) {
	c := throttledA(t, always{}, false) // level 200, a2 waits for 300
	c.Push(tr("urgent", "a", 9, 1, 100))
	if id := popID(t, c); id != "urgent" {
		t.Fatalf("got %q, want urgent (100 within the level 200)", id)
	}
	if id := popID(t, c); id != "" || c.NextReady() != t0+2e8 {
		t.Fatalf("got %q, NextReady t0%+d; want a2 waiting for 300 from 100: t0+200ms", id, c.NextReady()-t0)
	}
	// A request queued behind the head changes nothing.
	c.Push(kr("later", "a", 10, 1))
	if c.Throttled() != 1 {
		t.Fatal("a request behind the head: key not throttled")
	}
}

// TestBudgetFreePopReexamines: after a free dispatch in the work-conserving
// pass, the key's next request, within its budget, is served charged in the
// first pass, not free again.
func TestBudgetFreePopReexamines(t *testing.T) {
	c := throttledA(t, always{}, true) // level 200, a2 (300) waits
	c.Push(kr("small", "a", 9, 100))
	c.SetConserve(true)
	if id := popID(t, c); id != "a2" || !c.LastFree() {
		t.Fatalf("got %q (free %v), want a2 free", id, c.LastFree())
	}
	c.SetConserve(false)
	if id := popID(t, c); id != "small" || c.LastFree() {
		t.Fatalf("got %q (free %v), want small charged in the first pass", id, c.LastFree())
	}
}
