package drr

import (
	"math"
	"slices"
	"testing"
)

// step is one Next call and the state it must leave.
type step struct {
	k        int     // class taken, -1 for none
	id       int     // request taken (ignored when k is -1)
	deficits []int64 // every class's deficit afterwards
	cursor   int
	carry    int
}

// runSteps calls Next once per step and checks the outcome and the state after it.
func runSteps(t *testing.T, a *Arbiter, w *world, steps []step) {
	t.Helper()
	for i, s := range steps {
		k, r, err := w.next(a)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if k != s.k || (k >= 0 && r.id != s.id) {
			t.Fatalf("call %d: got class %d request %d, want class %d request %d", i, k, r.id, s.k, s.id)
		}
		if got := deficits(a); !slices.Equal(got, s.deficits) {
			t.Errorf("call %d: got deficits %v, want %v", i, got, s.deficits)
		}
		if got := a.Cursor(); got != s.cursor {
			t.Errorf("call %d: got cursor %d, want %d", i, got, s.cursor)
		}
		if got := a.Carry(); got != s.carry {
			t.Errorf("call %d: got carry %d, want %d", i, got, s.carry)
		}
	}
}

// TestBulkCreditCallsCandidateOnce checks the fast-forward asks each class for its
// candidate once even though steps 2, 3 and 5 all look at it.
func TestBulkCreditCallsCandidateOnce(t *testing.T) {
	w := newWorld(3)
	w.fakes[0].push(0, 500, 500)
	w.fakes[1].push(10, 900)
	w.fakes[2].push(20, 1)
	w.fakes[2].blocked = true
	a := New([]uint64{10, 10, 10})
	a.deficit[0] = 485 // short of 500 even after one quantum
	a.carry = 0
	if _, _, err := w.next(a); err != nil {
		t.Fatal(err)
	}
	for k, f := range w.fakes {
		if f.candidates != 1 {
			t.Errorf("class %d: got %d Candidate calls, want 1", k, f.candidates)
		}
	}
}

// TestWeightOneToThree: quanta 1 and 3 with cost-1 requests serve the classes one
// to three in every block of four dispatches.
func TestWeightOneToThree(t *testing.T) {
	const blocks = 250
	w := newWorld(2)
	for range 4 * blocks {
		w.fakes[0].push(0, 1)
		w.fakes[1].push(0, 1)
	}
	a := New([]uint64{1, 3})
	for b := range blocks {
		var count [2]int
		for range 4 {
			k, _, err := w.next(a)
			if err != nil {
				t.Fatal(err)
			}
			if k < 0 {
				t.Fatalf("block %d: nothing taken", b)
			}
			count[k]++
		}
		if count != [2]int{1, 3} {
			t.Fatalf("block %d: got %v dispatches per class, want [1 3]", b, count)
		}
	}
}

// TestOversizedHead: a head costing 25 quanta and more is dispatched in one call.
func TestOversizedHead(t *testing.T) {
	w := newWorld(1)
	w.fakes[0].push(0, 101, 101)
	a := New([]uint64{4})
	runSteps(t, a, w, []step{
		// 4 from the scan, 25 rounds of bulk credit: 104, pays 101.
		{k: 0, id: 0, deficits: []int64{3}, cursor: 0, carry: 0},
		{k: 0, id: 1, deficits: []int64{0}, cursor: 0, carry: -1},
		{k: -1, deficits: []int64{0}, cursor: 0, carry: -1},
	})
}

// TestBlockedDoesNotEarn: classes that stay blocked earn nothing, however many calls
// pass, whether the others are blocked too or dispatching.
func TestBlockedDoesNotEarn(t *testing.T) {
	t.Run("all blocked", func(t *testing.T) {
		w := newWorld(2)
		w.fakes[0].push(0, 5)
		w.fakes[1].push(10, 5)
		w.fakes[0].blocked, w.fakes[1].blocked = true, true
		a := New([]uint64{5, 7})
		for i := range 10000 {
			k, _, err := w.next(a)
			if err != nil || k != -1 {
				t.Fatalf("call %d: got class %d (%v), want nothing", i, k, err)
			}
			if got := deficits(a); !slices.Equal(got, []int64{0, 0}) {
				t.Fatalf("call %d: got deficits %v, want [0 0]", i, got)
			}
		}
	})
	t.Run("one blocked", func(t *testing.T) {
		w := newWorld(2)
		w.fakes[0].push(0, 5)
		w.fakes[0].blocked = true
		for range 10000 {
			w.fakes[1].push(10, 5)
		}
		a := New([]uint64{5, 5})
		a.deficit[0] = 2 // credit earned before it blocked: kept, not grown
		for i := range 10000 {
			k, _, err := w.next(a)
			if err != nil || k != 1 {
				t.Fatalf("call %d: got class %d (%v), want 1", i, k, err)
			}
			if got := a.Deficit(0); got != 2 {
				t.Fatalf("call %d: got blocked deficit %d, want 2", i, got)
			}
		}
		w.fakes[0].blocked = false
		runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{0, 0}, cursor: 1, carry: -1}})
	})
}

// TestEmptyResetsDeficit: a class emptied by a take has deficit 0 at once; one
// emptied outside the arbiter (an expiry) keeps its deficit until a ring scan
// visits it empty.
func TestEmptyResetsDeficit(t *testing.T) {
	w := newWorld(3)
	w.fakes[0].push(0, 2)
	w.fakes[1].push(10, 4, 4)
	w.fakes[2].push(20, 1, 1)
	a := New([]uint64{10, 10, 10})
	runSteps(t, a, w, []step{
		{k: 0, id: 0, deficits: []int64{0, 0, 0}, cursor: 1, carry: -1}, // emptied: 8 dropped
		{k: 1, id: 10, deficits: []int64{0, 6, 0}, cursor: 2, carry: 1},
	})
	w.fakes[1].items = nil // expired while holding 6 and the carry
	w.fakes[2].blocked = true
	// Class 2 blocked, class 1 empty but not visited by step 1 (something is queued).
	// The scan from 2 visits 2 (blocked), 0 (empty), 1 (empty: deficit 0). Nothing
	// taken: the carry stays.
	runSteps(t, a, w, []step{{k: -1, deficits: []int64{0, 0, 0}, cursor: 2, carry: 1}})
	w.fakes[2].blocked = false
	runSteps(t, a, w, []step{
		{k: 2, id: 20, deficits: []int64{0, 0, 9}, cursor: 0, carry: 2},
		{k: 2, id: 21, deficits: []int64{0, 0, 0}, cursor: 0, carry: -1},
	})
}

// TestNothingQueuedKeepsDeficits: step 1 clears the carry and nothing else, as docs/design.md
// (DRR) says; the cursor stays too.
func TestNothingQueuedKeepsDeficits(t *testing.T) {
	w := newWorld(2)
	w.fakes[0].push(0, 3, 3)
	a := New([]uint64{10, 10})
	runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{7, 0}, cursor: 1, carry: 0}})
	w.fakes[0].items = nil // expired
	runSteps(t, a, w, []step{{k: -1, deficits: []int64{7, 0}, cursor: 1, carry: -1}})
}

// TestTakeNothingKeepsCursorAndCarry: a call that takes nothing because everything
// queued is blocked leaves the cursor, the carry and the deficits.
func TestTakeNothingKeepsCursorAndCarry(t *testing.T) {
	w := newWorld(3)
	w.fakes[0].push(0, 1)
	w.fakes[1].push(10, 2, 2)
	w.fakes[2].push(20, 1)
	a := New([]uint64{5, 5, 5})
	a.cursor = 1
	runSteps(t, a, w, []step{{k: 1, id: 10, deficits: []int64{0, 3, 0}, cursor: 2, carry: 1}})
	for _, f := range w.fakes {
		f.blocked = true
	}
	for range 3 {
		runSteps(t, a, w, []step{{k: -1, deficits: []int64{0, 3, 0}, cursor: 2, carry: 1}})
	}
	// Unblocked: the carry is served before the cursor's class.
	for _, f := range w.fakes {
		f.blocked = false
	}
	runSteps(t, a, w, []step{{k: 1, id: 11, deficits: []int64{0, 0, 0}, cursor: 2, carry: -1}})
}

// TestCarry covers the carry: it wins over the cursor when affordable, adds no
// quantum, and falls through to the ring scan when blocked or unaffordable.
func TestCarry(t *testing.T) {
	t.Run("wins over cursor", func(t *testing.T) {
		w := newWorld(3)
		w.fakes[0].push(0, 1, 1, 1)
		w.fakes[1].push(10, 1)
		w.fakes[2].push(20, 1)
		a := New([]uint64{3, 3, 3})
		runSteps(t, a, w, []step{
			{k: 0, id: 0, deficits: []int64{2, 0, 0}, cursor: 1, carry: 0},
			{k: 0, id: 1, deficits: []int64{1, 0, 0}, cursor: 1, carry: 0},
			{k: 0, id: 2, deficits: []int64{0, 0, 0}, cursor: 1, carry: -1},
			{k: 1, id: 10, deficits: []int64{0, 0, 0}, cursor: 2, carry: -1},
		})
	})
	t.Run("blocked carry falls through", func(t *testing.T) {
		w := newWorld(2)
		w.fakes[0].push(0, 1, 1)
		w.fakes[1].push(10, 4, 4)
		a := New([]uint64{3, 3})
		runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{2, 0}, cursor: 1, carry: 0}})
		w.fakes[0].blocked = true
		runSteps(t, a, w, []step{
			// Scan from 1: 0+3 < 4; class 0 blocked. R = 1: 6 pays 4.
			{k: 1, id: 10, deficits: []int64{2, 2}, cursor: 0, carry: 1},
		})
	})
	t.Run("unaffordable carry earns in the scan", func(t *testing.T) {
		w := newWorld(2)
		w.fakes[0].push(0, 2, 4)
		w.fakes[1].push(10, 9)
		a := New([]uint64{3, 3})
		runSteps(t, a, w, []step{
			{k: 0, id: 0, deficits: []int64{1, 0}, cursor: 1, carry: 0},
			// Carry 1 < 4. Scan from 1: 3 < 9; class 0: 1 < 4, 1+3 = 4 pays.
			{k: 0, id: 1, deficits: []int64{0, 3}, cursor: 1, carry: -1},
		})
	})
	t.Run("cost zero", func(t *testing.T) {
		w := newWorld(2)
		w.fakes[0].push(0, 0, 0)
		w.fakes[1].push(10, 0)
		a := New([]uint64{3, 3})
		// Affordable at deficit 0: no quantum is added, so no carry either.
		runSteps(t, a, w, []step{
			{k: 0, id: 0, deficits: []int64{0, 0}, cursor: 1, carry: -1},
			{k: 1, id: 10, deficits: []int64{0, 0}, cursor: 0, carry: -1},
			{k: 0, id: 1, deficits: []int64{0, 0}, cursor: 1, carry: -1},
		})
	})
}

// TestCursorFairness: with equal quanta and costs the ring is served in turn, each
// scan starting after the class served last, not at the first class.
func TestCursorFairness(t *testing.T) {
	w := newWorld(3)
	for k, f := range w.fakes {
		for range 10 {
			f.push(k*100, 5)
		}
	}
	a := New([]uint64{5, 5, 5})
	var got []int
	for range 30 {
		k, _, err := w.next(a)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	for i, k := range got {
		if k != i%3 {
			t.Fatalf("got order %v, want 0,1,2 repeated", got)
		}
	}
	// A class served from the middle of the ring moves the cursor past it.
	w.fakes[0].push(0, 5)
	w.fakes[2].push(0, 5)
	w.fakes[0].blocked = true
	runSteps(t, a, w, []step{{k: 2, id: 0, deficits: []int64{0, 0, 0}, cursor: 0, carry: -1}})
	w.fakes[0].blocked = false
	runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{0, 0, 0}, cursor: 1, carry: -1}})
}

// TestFinalScanFromCursor: when bulk credit makes several classes affordable at
// once, the first from the cursor is served, not the lowest index.
func TestFinalScanFromCursor(t *testing.T) {
	w := newWorld(3)
	w.fakes[0].push(0, 100)
	w.fakes[1].push(10, 100)
	w.fakes[2].push(20, 100)
	a := New([]uint64{10, 10, 10})
	a.cursor = 2
	runSteps(t, a, w, []step{
		{k: 2, id: 20, deficits: []int64{100, 100, 0}, cursor: 0, carry: -1},
		{k: 0, id: 0, deficits: []int64{0, 100, 0}, cursor: 1, carry: -1},
		{k: 1, id: 10, deficits: []int64{0, 0, 0}, cursor: 2, carry: -1},
	})
}

// TestHugeCostsClamp: costs and quanta near the top of uint64, far beyond the
// 2^40 the configuration allows, are read as 2^42, still dispatch and never wrap
// a deficit.
func TestHugeCostsClamp(t *testing.T) {
	const q = 1<<63 + 1
	w := newWorld(2)
	w.fakes[0].push(0, math.MaxUint64, 5)
	w.fakes[1].push(10, math.MaxUint64)
	a := New([]uint64{q, q})
	// Both read as 2^42: one quantum pays one request.
	runSteps(t, a, w, []step{
		{k: 0, id: 0, deficits: []int64{0, 0}, cursor: 1, carry: -1},
		{k: 1, id: 10, deficits: []int64{0, 0}, cursor: 0, carry: -1},
		{k: 0, id: 1, deficits: []int64{0, 0}, cursor: 1, carry: -1},
	})
	if got := mulSat(1<<32, 1<<32); got != math.MaxUint64 {
		t.Errorf("mulSat(2^32, 2^32): got %d, want %d", got, uint64(math.MaxUint64))
	}
	if got := mulSat(3, 5); got != 15 {
		t.Errorf("mulSat(3, 5): got %d, want 15", got)
	}
	if got := ceilDiv(math.MaxUint64, 2); got != 1<<63 {
		t.Errorf("ceilDiv(2^64-1, 2): got %d, want 2^63", got)
	}
}

func TestZeroClasses(t *testing.T) {
	a := New(nil)
	if k, ok := a.Next(nil); ok || k != -1 {
		t.Errorf("got (%d, %v), want (-1, false)", k, ok)
	}
	if a.Cursor() != 0 || a.Carry() != -1 {
		t.Errorf("got cursor %d carry %d, want 0 and -1", a.Cursor(), a.Carry())
	}
}

func TestNewCopiesQuanta(t *testing.T) {
	quanta := []uint64{1, 3}
	a := New(quanta)
	quanta[0] = 1000
	w := newWorld(2)
	w.fakes[0].push(0, 2)
	// With quantum 1 the scan leaves deficit 1 < 2, then bulk credit 1 more.
	runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{0, 0}, cursor: 1, carry: -1}})
	if got := a.quanta[0]; got != 1 {
		t.Errorf("got quantum %d, want 1", got)
	}
}

func TestPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"zero quantum", func() { New([]uint64{1, 0}) }},
		{"wrong class count", func() { New([]uint64{1, 2}).Next(make([]Queue, 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("got no panic, want one")
				}
			}()
			tc.f()
		})
	}
}

// endlessQueue is a class that always holds work and never runs dry, so Next takes
// something on every call without the test refilling (and allocating).
type endlessQueue struct {
	cost    uint64
	blocked bool
}

func (e *endlessQueue) Empty() bool               { return false }
func (e *endlessQueue) Candidate() (uint64, bool) { return e.cost, !e.blocked }
func (e *endlessQueue) Pop()                      {}

func endless() []Queue {
	return []Queue{
		&endlessQueue{cost: 700},
		&endlessQueue{cost: 3},
		&endlessQueue{cost: 1, blocked: true},
		&endlessQueue{cost: 90000},
	}
}

func TestNextDoesNotAllocate(t *testing.T) {
	qs := endless()
	a := New([]uint64{100, 4, 10, 2000})
	if got := testing.AllocsPerRun(1000, func() { a.Next(qs) }); got != 0 {
		t.Errorf("got %v allocations per Next, want 0", got)
	}
}

func BenchmarkNextFake(b *testing.B) {
	qs := endless()
	a := New([]uint64{100, 4, 10, 2000})
	b.ReportAllocs()
	for b.Loop() {
		a.Next(qs)
	}
}

// TestChargeDebt: a settlement correction can put a class in debt, down to
// MinDeficit; a class in debt earns quanta until it can pay (bulk credit counts
// the debt), and keeps the debt, not credit, when it empties.
func TestChargeDebt(t *testing.T) {
	w := newWorld(2)
	w.fakes[0].push(0, 10, 10)
	w.fakes[1].push(10, 10, 10)
	a := New([]uint64{10, 10})
	a.Charge(0, 25) // class 0's last request really cost 25 more
	runSteps(t, a, w, []step{
		// Class 0 at -25 + 10 cannot pay; class 1 can. Then bulk credit: class 0
		// needs ceil((10+15)/10) = 3 rounds, class 1 one: R = 1.
		{k: 1, id: 10, deficits: []int64{-15, 0}, cursor: 0, carry: -1},
		{k: 1, id: 11, deficits: []int64{-5, 0}, cursor: 0, carry: -1},
		{k: 0, id: 0, deficits: []int64{5, 0}, cursor: 1, carry: 0},
	})
	a.Charge(0, 1<<50)
	if got := a.Deficit(0); got != MinDeficit {
		t.Errorf("got deficit %d after a huge correction, want MinDeficit %d", got, int64(MinDeficit))
	}
	a.Charge(1, -(1 << 50))
	if got := a.Deficit(1); got != maxDeficit {
		t.Errorf("got deficit %d after a huge refund, want %d", got, int64(maxDeficit))
	}
}

// TestDebtSurvivesEmpty: a class in debt that empties keeps the debt (not
// credit), and pays it back once it is backlogged again.
func TestDebtSurvivesEmpty(t *testing.T) {
	w := newWorld(2)
	w.fakes[0].push(0, 10)
	a := New([]uint64{10, 10})
	runSteps(t, a, w, []step{{k: 0, id: 0, deficits: []int64{0, 0}, cursor: 1, carry: -1}})
	a.Charge(0, 30) // its request really cost 40
	// Class 1 is served twice while class 0 is empty: the second scan visits the
	// empty class 0, which keeps its debt.
	w.fakes[1].push(10, 10, 10)
	runSteps(t, a, w, []step{
		{k: 1, id: 10, deficits: []int64{-30, 0}, cursor: 0, carry: -1},
		{k: 1, id: 11, deficits: []int64{-30, 0}, cursor: 0, carry: -1},
	})
	w.fakes[0].push(1, 10)
	w.fakes[1].push(12, 10, 10, 10)
	// Class 0 earns a quantum a round (-30 -> 10) while class 1 is served.
	runSteps(t, a, w, []step{
		{k: 1, id: 12, deficits: []int64{-20, 0}, cursor: 0, carry: -1},
		{k: 1, id: 13, deficits: []int64{-10, 0}, cursor: 0, carry: -1},
		{k: 1, id: 14, deficits: []int64{0, 0}, cursor: 0, carry: -1},
		{k: 0, id: 1, deficits: []int64{0, 0}, cursor: 1, carry: -1},
	})
}
