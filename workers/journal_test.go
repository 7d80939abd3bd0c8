package workers

import (
	"fmt"
	"testing"
)

// TestChangedJournal: each change journals its worker once until drained; an
// expired worker is listed; past its bound the journal says "all".
func TestChangedJournal(t *testing.T) {
	g := New()
	rep := func(id string) Report {
		return Report{WorkerID: id, Instance: "i", DPSize: 2, TTLms: 1000, HasSeenSeq: true}
	}
	a, _, _ := g.Apply(0, rep("a"))
	b, _, _ := g.Apply(0, rep("b"))
	seq := g.Book(0, a, 0, 5)
	g.Book(0, a, 1, 5)
	if ws, all := g.Changed(); len(ws) != 2 || all {
		t.Fatalf("Changed after reports and bookings: got %d workers (all %v), want 2", len(ws), all)
	}
	if ws, _ := g.Changed(); len(ws) != 0 {
		t.Fatalf("Changed again: got %d workers, want 0", len(ws))
	}
	g.Unbook(a, seq)
	if ws, _ := g.Changed(); len(ws) != 1 || ws[0] != a {
		t.Fatalf("Changed after Unbook: got %v, want [a]", ws)
	}
	g.Refused(0, b, 0)
	if ws, _ := g.Changed(); len(ws) != 1 || ws[0] != b {
		t.Fatalf("Changed after Refused: got %v, want [b]", ws)
	}
	g.Accepted(b)
	g.Changed()
	g.Apply(500e6, rep("a"))
	g.Changed()
	g.Expire(1200e6, nil) // b expires; a's last booking ages out
	ws, _ := g.Changed()
	if len(ws) != 2 || ws[0] != a || ws[1] != b || g.Get("b") != nil {
		t.Fatalf("Changed after expiry: got %v, want [a b], b gone", ws)
	}
	// Workers coming and going with nobody draining: the journal stays bounded.
	now := int64(2000e6)
	for c := range 10 {
		for i := range 50 {
			g.Apply(now, rep(fmt.Sprintf("x%d-%02d", c, i)))
		}
		now += 2000e6
		g.Expire(now, nil)
	}
	if n := len(g.changed); n > 2*g.Len()+64 {
		t.Fatalf("journal holds %d workers, over its bound %d", n, 2*g.Len()+64)
	}
	if ws, all := g.Changed(); !all || len(ws) != 0 {
		t.Fatalf("Changed after overflow: got %d workers, all %v; want 0, true", len(ws), all)
	}
}
