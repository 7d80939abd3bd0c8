package lanes

import (
	"slices"
	"testing"

	"fairdispatch/request"
)

// TestReorderKeepsStanding: Reorder puts every queued request back in the
// order the callback gives (here reversed: the newest first) and keeps each
// key's service, its owed dispatches and its floor credit, even a key it
// had to forget while its requests were out.
func TestReorderKeepsStanding(t *testing.T) {
	c := NewKeyed(always{}, KeyConfig{MinShare: map[uint32]float64{0: 0.25}})
	if n := c.Reorder(func(*request.Snapshot) {}); n != 0 {
		t.Fatalf("empty class: %d put back", n)
	}
	for i, r := range []*request.Snapshot{tr("a1", "a", 1, 1, 100), tr("a2", "a", 2, 1, 100), tr("a3", "a", 3, 0, 100),
		tr("b1", "b", 4, 1, 50), tr("b2", "b", 5, 1, 50)} {
		r.Score = -float64(i)
		c.Push(r)
	}
	c.Candidate()
	c.Pop() // a1: a is charged, owed one, and its tier 0 earns credit
	va, _ := c.Service("a")
	vb, _ := c.Service("b")
	credit := floorOf(c, "a", 0).credit
	if n := c.Reorder(func(r *request.Snapshot) { r.Score = float64(r.Seq) }); n != 4 {
		t.Fatalf("%d put back, want 4", n)
	}
	va2, _ := c.Service("a")
	vb2, _ := c.Service("b")
	if va2 != va || vb2 != vb || c.byName["a"].owed != 1 || floorOf(c, "a", 0) == nil || floorOf(c, "a", 0).credit != credit {
		t.Fatalf("after Reorder: a %v (owed %d), b %v; want a %v owed 1, b %v, a's tier 0 credit %v kept",
			va2, c.byName["a"].owed, vb2, va, vb, credit)
	}
	got := popAll(t, c)
	if len(got) != 4 || slices.Index(got, "b2") > slices.Index(got, "b1") {
		t.Fatalf("order after Reorder: %v, want all four with b2 before b1 (newest first)", got)
	}
}

// TestReorderKeepsKeysPastMaxKeys: at MaxKeys, the keys a class tracks stay
// themselves through Reorder, and the overflow key keeps the newcomers,
// whatever order the requests come back in.
func TestReorderKeepsKeysPastMaxKeys(t *testing.T) {
	for range 20 { // the requests come back in map order: try several
		c := NewKeyed(always{}, KeyConfig{MaxKeys: 2})
		for i, key := range []string{"a", "b", "c", "d"} {
			c.Push(kr(key+"1", key, uint64(i+1), 100))
		}
		c.Reorder(func(*request.Snapshot) {})
		for _, key := range []string{"a", "b", OverflowKey} {
			if _, ok := c.Service(key); !ok {
				t.Fatalf("key %s not tracked after Reorder", key)
			}
		}
		if got := len(popAll(t, c)); got != 4 {
			t.Fatalf("%d requests after Reorder, want 4", got)
		}
	}
}
