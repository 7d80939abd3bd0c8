package lanes

import (
	"testing"
)

// TestKeyedEachSince: a measurement window reports the normalized service each
// key gained since the mark, settlement corrections included, and leaves out a
// key that became backlogged after the mark (its lift to the virtual time is
// not service) and one that went idle meanwhile.
func TestKeyedEachSince(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{Weights: map[string]float64{"a": 2}})
	push := pushKeyed(c)
	gained := func(slot int) map[string]float64 {
		got := map[string]float64{}
		c.EachSince(slot, func(name string, g, _ float64, _ int) bool {
			got[name] = g
			return true
		})
		return got
	}
	if got := gained(0); len(got) != 0 {
		t.Fatalf("before any mark: got %v, want nothing", got)
	}
	for range 10 {
		push("a", 100)
		push("b", 100)
	}
	push("idle", 100)
	c.Candidate()
	c.Pop() // some service before the mark: not counted
	c.Mark(0)
	for range 3 { // b and idle (v 0), then a
		c.Candidate()
		c.Pop()
	}
	push("late", 100) // backlogged after the mark
	c.Settle("b", 50) // b's last request really cost 150
	got := gained(0)
	if _, ok := got["late"]; ok {
		t.Errorf("late key reported: %v", got)
	}
	if _, ok := got["idle"]; ok {
		t.Errorf("a key that went idle reported: %v", got)
	}
	if len(got) != 2 || got["a"] <= 0 || got["b"] <= 0 {
		t.Fatalf("got %v, want a and b with positive service", got)
	}
	// Gains are the change of v since the mark, corrections included.
	c2 := gained(0)
	if c2["a"] != got["a"] || c2["b"] != got["b"] {
		t.Fatalf("two reads differ: %v then %v", got, c2)
	}
	c.Mark(1)
	if g := gained(1); g["a"] != 0 || g["b"] != 0 || g["late"] != 0 {
		t.Fatalf("just after a mark: got %v, want 0 each", g)
	}
	c.Settle("a", 200)
	if g := gained(1); g["a"] != 100 { // 200 / weight 2
		t.Fatalf("after a correction of 200 to a (weight 2): got %v, want a 100", g)
	}
}
