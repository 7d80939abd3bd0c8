package drr

import (
	"math/bits"
	"strconv"
)

// MinDeficit is the lowest a deficit may go: settlement corrections
// ([Arbiter.Charge]) put a class in debt down to -2^40 at most (docs/design.md,
// Cost settlement).
const MinDeficit = -(1 << 40)

// maxDeficit bounds a deficit from above against absurd corrections; ordinary
// arbitration keeps it below max cost + max quantum <= 2^41.
const maxDeficit = 1 << 42

// maxCost bounds a candidate's cost as the arbiter reads it, so that deficit
// arithmetic in int64 cannot wrap; configured costs are at most 2^40.
const maxCost = 1 << 42

// Queue is one policy class as the arbiter sees it.
type Queue interface {
	// Empty reports whether the class holds no queued request at all.
	Empty() bool
	// Candidate returns the DRR cost of the class's candidate (docs/design.md, Lanes) and true,
	// or false when the class has queued work but nothing dispatchable.
	// Calling it may move blocked lanes aside inside the class, so the arbiter calls it
	// at most once per class per Next call and caches the answer.
	Candidate() (cost uint64, ok bool)
	// Pop removes the candidate returned by the last Candidate call.
	Pop()
}

// noCarry is the value of Arbiter.carry when no carry class is set.
const noCarry = -1

// What one Next call has learnt about a class so far (Arbiter.seen). Step 1 asks
// every class Empty, so each call starts from seenEmpty or seenQueued.
const (
	seenEmpty   = iota // Empty returned true
	seenQueued         // Empty returned false; Candidate not asked yet
	seenBlocked        // Candidate returned false
	seenReady          // Candidate returned true; its cost is in Arbiter.cost
)

// Arbiter is the DRR state: a deficit per class (negative while the class owes
// settlement corrections), a ring cursor and an optional carry class. The zero value is not usable; call New.
type Arbiter struct {
	quanta  []uint64 // per class, > 0; copied from New's argument
	deficit []int64  // per class: earned, unspent credit; below 0: debt
	cursor  int      // first class the next ring scan visits, in [0, n)
	carry   int      // class that may keep spending its deficit, or noCarry

	// Per-call scratch, allocated once in New so that Next does not allocate.
	seen []uint8  // per class: seenEmpty ... seenReady
	cost []uint64 // per class: the candidate's cost when seen is seenReady
}

// New returns an arbiter for len(quanta) classes in ring order (the order the policy
// file lists them). Each quantum is the credit in cost units (uncached tokens) a
// class earns per DRR round; it must be > 0, and the configuration bounds it to
// 2^40 (a quantum, like a cost, above 2^42 is read as 2^42).
// New panics on a zero quantum: that is a broken caller invariant. The cursor starts
// at class 0, every deficit at 0, and no carry is set. New copies quanta.
func New(quanta []uint64) *Arbiter {
	for k, q := range quanta {
		if q == 0 {
			panic("drr: quantum of class " + strconv.Itoa(k) + " is 0")
		}
	}
	n := len(quanta)
	qs := make([]uint64, n)
	for k, q := range quanta {
		qs[k] = min(q, maxCost) // beyond any configured quantum; keeps int64 deficits from wrapping
	}
	return &Arbiter{
		quanta:  qs,
		deficit: make([]int64, n),
		carry:   noCarry,
		seen:    make([]uint8, n),
		cost:    make([]uint64, n),
	}
}

// Next runs one arbitration call (docs/design.md, DRR) over qs, which holds the classes in the
// order given to New. It chooses at most one class, calls Pop on it exactly once,
// charges it the candidate's cost and returns its index and true; or it returns
// -1 and false when nothing is queued or nothing is dispatchable. It calls Empty
// once per class (and once more on the class taken, after its Pop) and Candidate at
// most once per class, and never allocates. Cost: O(C) for C classes plus those
// calls, whatever the costs and quanta.
//
// Next panics when len(qs) differs from the number of classes.
func (a *Arbiter) Next(qs []Queue) (k int, ok bool) {
	n := len(a.quanta)
	if len(qs) != n {
		panic("drr: Next called with the wrong number of classes")
	}

	// 1. Nothing queued: clear the carry, return nothing.
	queued := false
	for i, q := range qs {
		if q.Empty() {
			a.seen[i] = seenEmpty
		} else {
			a.seen[i] = seenQueued
			queued = true
		}
	}
	if !queued {
		a.carry = noCarry
		return -1, false
	}

	// 2. Carry: spend the carry class's remaining deficit without a new quantum.
	if c := a.carry; c != noCarry && a.seen[c] != seenEmpty {
		if cost, ready := a.candidate(qs, c); ready && int64(cost) <= a.deficit[c] {
			return a.take(qs, c), true
		}
		// Empty, blocked or not affordable: fall through. The carry itself is left
		// alone; take overwrites it, and a call that takes nothing keeps it.
	}

	// 3. Ring scan, once round from the cursor.
	anyReady := false
	for i := range n {
		j := a.cursor + i
		if j >= n {
			j -= n
		}
		if a.seen[j] == seenEmpty {
			a.deficit[j] = min(a.deficit[j], 0) // credit goes, debt stays
			continue
		}
		cost, ready := a.candidate(qs, j)
		if !ready {
			continue // blocked: keep the deficit, add nothing
		}
		anyReady = true
		if int64(cost) <= a.deficit[j] {
			return a.take(qs, j), true
		}
		// Here deficit < cost, so after the add deficit < cost + quantum.
		a.deficit[j] += int64(a.quanta[j])
		if int64(cost) <= a.deficit[j] {
			return a.take(qs, j), true
		}
	}

	// 4. Bulk credit: skip the virtual rounds in which nobody could pay.
	if !anyReady {
		return -1, false
	}
	// Every ready class has deficit < cost here (the scan took nothing), so each
	// needs at least one more round and r >= 1.
	r := uint64(0)
	for j := range n {
		if a.seen[j] != seenReady {
			continue
		}
		need := ceilDiv(uint64(int64(a.cost[j])-a.deficit[j]), a.quanta[j]) // debt counts
		if r == 0 || need < r {
			r = need
		}
	}
	// Overflow: for every ready class j, r <= ceil((cost_j - deficit_j) / quantum_j),
	// so r*quantum_j < cost_j - deficit_j + quantum_j and the new deficit
	// deficit_j + r*quantum_j < cost_j + quantum_j <= 2^42 + 2^40. The same bound
	// holds after step 3's single quantum; with deficits >= -2^40 and costs and
	// quanta below 2^43, r*quantum_j < 2^45 and nothing here can wrap in int64.
	for j := range n {
		if a.seen[j] == seenReady {
			a.deficit[j] += int64(mulSat(r, a.quanta[j]))
		}
	}

	// 5. Final scan from the cursor: the first affordable class. The class that set
	// r is affordable now, so this always takes something.
	for i := range n {
		j := a.cursor + i
		if j >= n {
			j -= n
		}
		if a.seen[j] == seenReady && int64(a.cost[j]) <= a.deficit[j] {
			return a.take(qs, j), true
		}
	}
	panic("drr: bulk credit left no class affordable")
}

// candidate returns class k's candidate, asking the queue only the first time in a
// Next call. k must be queued (seen is not seenEmpty).
func (a *Arbiter) candidate(qs []Queue, k int) (uint64, bool) {
	switch a.seen[k] {
	case seenReady:
		return a.cost[k], true
	case seenBlocked:
		return 0, false
	}
	cost, ok := qs[k].Candidate()
	if !ok {
		a.seen[k] = seenBlocked
		return 0, false
	}
	a.seen[k] = seenReady
	a.cost[k] = min(cost, maxCost)
	return a.cost[k], true
}

// take pops class k's candidate, which must be ready and affordable, charges it,
// and moves the cursor and the carry. It returns k.
func (a *Arbiter) take(qs []Queue, k int) int {
	qs[k].Pop()
	a.deficit[k] -= int64(a.cost[k]) // cost <= deficit: checked by every caller
	a.cursor = k + 1
	if a.cursor == len(a.quanta) {
		a.cursor = 0
	}
	switch {
	case qs[k].Empty():
		a.deficit[k] = min(a.deficit[k], 0) // credit goes, debt stays
		a.carry = noCarry
	case a.deficit[k] > 0:
		a.carry = k
	default:
		a.carry = noCarry
	}
	return k
}

// Reconfigure changes the classes between two Next calls (a policy change,
// docs/design.md, Live policy): quanta are the new classes' quanta in their
// ring order, and from[k] is new class k's index before the change, or -1 for
// a class that is new. A class kept keeps its deficit; a new class starts at
// 0. The carry stays on its class if it is kept; the cursor stays on its class
// if it is kept, else moves to the first kept class after it in the old ring
// order, else to 0. It panics on a zero quantum or when len(from) differs from
// len(quanta). Cost: O(old + new classes); it allocates the new slices.
func (a *Arbiter) Reconfigure(quanta []uint64, from []int) {
	if len(from) != len(quanta) {
		panic("drr: Reconfigure with len(from) != len(quanta)")
	}
	b := New(quanta)
	old := len(a.quanta)
	to := make([]int, old)
	for i := range to {
		to[i] = -1
	}
	for k, f := range from {
		if f >= 0 && f < old {
			b.deficit[k] = a.deficit[f]
			to[f] = k
		}
	}
	if a.carry != noCarry {
		b.carry = to[a.carry]
	}
	for i := range old {
		j := a.cursor + i
		if j >= old {
			j -= old
		}
		if to[j] >= 0 {
			b.cursor = to[j]
			break
		}
	}
	*a = *b
}

// Deficit returns class k's deficit: credit, in cost units, earned and not yet
// spent; negative while the class owes settlement corrections. It panics when k
// is out of range.
func (a *Arbiter) Deficit(k int) int64 { return a.deficit[k] }

// Charge applies a settlement correction to class k's deficit (docs/design.md,
// Cost settlement): delta is actual minus charged cost, so a positive delta
// lowers the deficit, possibly below zero, down to MinDeficit; a negative one
// (the request cost less than charged) raises it. O(1).
func (a *Arbiter) Charge(k int, delta int64) {
	d := a.deficit[k] - delta
	switch {
	case delta > 0 && d > a.deficit[k], d < MinDeficit: // wrapped, or below the floor
		d = MinDeficit
	case delta < 0 && d < a.deficit[k], d > maxDeficit:
		d = maxDeficit
	}
	a.deficit[k] = d
}

// Cursor returns the class the next ring scan starts at, in [0, number of classes);
// 0 when there are no classes.
func (a *Arbiter) Cursor() int { return a.cursor }

// Carry returns the carry class, which the next Next call serves first if its
// candidate is affordable from its deficit, or -1 when no carry is set.
func (a *Arbiter) Carry() int { return a.carry }

// ceilDiv returns ceil(x / q) for q > 0 without the overflow of (x + q - 1) / q.
func ceilDiv(x, q uint64) uint64 {
	d := x / q
	if x%q != 0 {
		d++
	}
	return d
}

// mulSat returns x * y, or the largest uint64 if that overflows.
func mulSat(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}
