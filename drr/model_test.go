package drr

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// refArbiter is a deliberately naive DRR arbiter, docs/design.md, DRR without the bulk credit:
// when a ring scan takes nothing it grants virtual rounds one at a time (a quantum
// to every dispatchable class, then a scan from the cursor) until somebody can pay.
// Settlement corrections (docs/design.md, Cost settlement) move a deficit, down to
// MinDeficit; a class in debt earns quanta round by round until it can pay, and
// keeps its debt (not its credit) when it empties.
// Deficits are int64 so that an underflow would show as a negative number. It
// reads the fake classes directly and may look at them as often as it likes.
type refArbiter struct {
	quanta  []int64
	deficit []int64
	cursor  int
	carry   int
}

func newRef(quanta []uint64) *refArbiter {
	r := &refArbiter{deficit: make([]int64, len(quanta)), carry: -1}
	for _, q := range quanta {
		r.quanta = append(r.quanta, int64(q))
	}
	return r
}

func (r *refArbiter) next(fs []*fakeQueue) (int, req) {
	n := len(fs)
	ready := func(k int) bool { return len(fs[k].items) > 0 && !fs[k].blocked }
	cost := func(k int) int64 { return int64(fs[k].items[0].cost) }

	queued := false
	for _, f := range fs {
		if len(f.items) > 0 {
			queued = true
		}
	}
	if !queued {
		r.carry = -1
		return -1, req{id: -1}
	}
	if c := r.carry; c >= 0 && ready(c) && cost(c) <= r.deficit[c] {
		return r.take(fs, c)
	}
	anyReady := false
	for i := range n {
		k := (r.cursor + i) % n
		if len(fs[k].items) == 0 {
			r.deficit[k] = min(r.deficit[k], 0) // credit goes, debt stays
			continue
		}
		if !ready(k) {
			continue
		}
		anyReady = true
		if cost(k) <= r.deficit[k] {
			return r.take(fs, k)
		}
		r.deficit[k] += r.quanta[k]
		if cost(k) <= r.deficit[k] {
			return r.take(fs, k)
		}
	}
	if !anyReady {
		return -1, req{id: -1}
	}
	for {
		for k := range n {
			if ready(k) {
				r.deficit[k] += r.quanta[k]
			}
		}
		for i := range n {
			k := (r.cursor + i) % n
			if ready(k) && cost(k) <= r.deficit[k] {
				return r.take(fs, k)
			}
		}
	}
}

func (r *refArbiter) take(fs []*fakeQueue, k int) (int, req) {
	f := fs[k]
	got := f.items[0]
	f.items = f.items[1:]
	r.deficit[k] -= int64(got.cost)
	r.cursor = (k + 1) % len(fs)
	switch {
	case len(f.items) == 0:
		r.deficit[k] = min(r.deficit[k], 0)
		r.carry = -1
	case r.deficit[k] > 0:
		r.carry = k
	default:
		r.carry = -1
	}
	return k, got
}

// drawCost draws a request cost: usually 0..500, now and then up to 10^6.
func drawCost(t *rapid.T) uint64 {
	if rapid.IntRange(0, 19).Draw(t, "huge") == 0 {
		return rapid.Uint64Range(10_000, 1_000_000).Draw(t, "hugeCost")
	}
	return rapid.Uint64Range(0, 500).Draw(t, "cost")
}

// TestMatchesReference drives the Arbiter and the naive reference through the same
// random enqueues, expiries, blockings and calls, and checks that they dispatch the
// same requests in the same order with the same state, that deficits stay bounded,
// and that every request is dispatched or expired exactly once.
func TestMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "classes")
		quanta := rapid.SliceOfN(rapid.Uint64Range(1, 50), n, n).Draw(t, "quanta")
		var maxQuantum, maxCost uint64
		for _, q := range quanta {
			maxQuantum = max(maxQuantum, q)
		}

		a, ref := New(quanta), newRef(quanta)
		var refunds int64                 // settlement corrections that raised a deficit
		w, rw := newWorld(n), newWorld(n) // the arbiter's classes, the reference's
		nextID := 0
		seen := map[int]int{} // request id -> times dispatched or expired

		call := func(label string) (took bool) {
			k, got, err := w.next(a)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			rk, want := ref.next(rw.fakes)
			if k != rk || got.id != want.id {
				t.Fatalf("%s: got class %d request %d, reference class %d request %d",
					label, k, got.id, rk, want.id)
			}
			for j := range n {
				d := a.Deficit(j)
				if int64(d) != ref.deficit[j] {
					t.Fatalf("%s: class %d: got deficit %d, reference %d", label, j, d, ref.deficit[j])
				}
				if d > int64(maxCost+maxQuantum)+refunds || d < MinDeficit {
					t.Fatalf("%s: class %d: deficit %d outside [%d, max cost %d + max quantum %d + refunds %d]",
						label, j, d, int64(MinDeficit), maxCost, maxQuantum, refunds)
				}
			}
			if a.Cursor() != ref.cursor || a.Carry() != ref.carry {
				t.Fatalf("%s: got cursor %d carry %d, reference %d %d",
					label, a.Cursor(), a.Carry(), ref.cursor, ref.carry)
			}
			if k >= 0 {
				seen[got.id]++
			}
			return k >= 0
		}

		steps := rapid.IntRange(0, 150).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 10).Draw(t, "op") {
			case 10: // a settlement correction: actual - charged
				k := rapid.IntRange(0, n-1).Draw(t, "class")
				delta := rapid.Int64Range(-300, 3000).Draw(t, "delta")
				a.Charge(k, delta)
				ref.deficit[k] = max(ref.deficit[k]-delta, MinDeficit)
				if delta < 0 {
					refunds -= delta
				}
			case 0, 1, 2: // enqueue
				k := rapid.IntRange(0, n-1).Draw(t, "class")
				c := drawCost(t)
				maxCost = max(maxCost, c)
				w.fakes[k].push(nextID, c)
				rw.fakes[k].push(nextID, c)
				nextID++
			case 3: // toggle blocked
				k := rapid.IntRange(0, n-1).Draw(t, "class")
				w.fakes[k].blocked = !w.fakes[k].blocked
				rw.fakes[k].blocked = w.fakes[k].blocked
			case 4: // a queued request expires, outside the arbiter
				k := rapid.IntRange(0, n-1).Draw(t, "class")
				if len(w.fakes[k].items) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(w.fakes[k].items)-1).Draw(t, "index")
				seen[w.fakes[k].items[i].id]++
				w.fakes[k].items = slices.Delete(slices.Clone(w.fakes[k].items), i, i+1)
				rw.fakes[k].items = slices.Delete(slices.Clone(rw.fakes[k].items), i, i+1)
			default:
				call("call")
			}
		}

		// Drain with everything unblocked: each call takes one request.
		for k := range n {
			w.fakes[k].blocked, rw.fakes[k].blocked = false, false
		}
		for i := 0; call("drain"); i++ {
			if i > nextID {
				t.Fatalf("drain: more dispatches than requests")
			}
		}
		for k, f := range w.fakes {
			if len(f.items) != 0 {
				t.Fatalf("class %d: %d requests left after the drain", k, len(f.items))
			}
		}
		for id := range nextID {
			if seen[id] != 1 {
				t.Fatalf("request %d: dispatched or expired %d times, want once", id, seen[id])
			}
		}
	})
}
