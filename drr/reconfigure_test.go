package drr

import "testing"

func TestReconfigureKeepsDeficitsCursorAndCarryByClass(t *testing.T) {
	a := New([]uint64{10, 20, 30})
	a.deficit = []int64{1, 2, -3}
	a.cursor, a.carry = 1, 2
	// New ring: [old 2, new class, old 0]; old 1 is removed.
	a.Reconfigure([]uint64{5, 6, 7}, []int{2, -1, 0})
	if got := a.deficit; got[0] != -3 || got[1] != 0 || got[2] != 1 {
		t.Errorf("deficits = %v, want [-3 0 1] (a debt is kept too)", got)
	}
	// The cursor was on removed class 1: the next kept class is old 2, now 0.
	if a.Cursor() != 0 || a.Carry() != 0 {
		t.Errorf("cursor %d carry %d, want 0 and 0", a.Cursor(), a.Carry())
	}
	if len(a.seen) != 3 || len(a.cost) != 3 || a.quanta[1] != 6 {
		t.Errorf("scratch %d %d, quanta %v; want sized 3 and the new quanta", len(a.seen), len(a.cost), a.quanta)
	}

	b := New([]uint64{10, 20})
	b.cursor, b.carry = 1, 1
	b.Reconfigure([]uint64{10}, []int{0}) // class 1 (cursor and carry) removed
	if b.Cursor() != 0 || b.Carry() != -1 {
		t.Errorf("cursor %d carry %d, want 0 and -1", b.Cursor(), b.Carry())
	}
}
