package lanes

import (
	"fmt"
	"strings"
	"testing"

	"fairdispatch/request"
)

// describe renders Inspect's result in one line per key, lanes in brackets.
func describe(c *Keyed) string {
	var b strings.Builder
	for _, ks := range c.Inspect() {
		fmt.Fprintf(&b, "%s w=%g v=%g n=%d owed=%d ready=%v shared%s=%s", ks.Name, ks.Weight, ks.Service, ks.Queued, ks.Owed, ks.Ready, ks.SharedHeld, idList(ks.Shared))
		for _, l := range ks.Pinned {
			fmt.Fprintf(&b, " pin %s/%d blocked=%v %s", l.Target.Worker, l.Target.Rank, l.Blocked, idList(l.Requests))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func idList(rs []*request.Snapshot) string { return "[" + strings.Join(ids(rs), " ") + "]" }

func keyed(id, key string, seq uint64, t request.Target) *request.Snapshot {
	r := mk(id, seq, 0, 0, t)
	r.Key = key
	return r
}

// TestKeyedInspect follows a keyed class through the states Inspect reports:
// lanes in dispatch order whatever the heap's layout, a pinned lane blocked
// and set aside with its key, a gated unconstrained shared head, a blocked
// constrained one, and a key kept idle while it is owed a settlement; then a
// recheck and a weight change.
func TestKeyedInspect(t *testing.T) {
	chk := newFakeCheck()
	c := NewKeyed(chk, KeyConfig{Weights: map[string]float64{"a": 2}})
	if !c.Empty() || len(c.Inspect()) != 0 {
		t.Fatal("a new class: want empty, no keys")
	}
	// Pushed out of order: Inspect lists each lane head first.
	for _, r := range []*request.Snapshot{
		keyed("a3", "a", 3, shared), keyed("a1", "a", 1, shared), keyed("a2", "a", 2, shared),
		keyed("p2", "a", 5, pin("w1", 0)), keyed("p1", "a", 4, pin("w1", 0)),
		keyed("q1", "a", 6, pin("w1", request.AnyRank)), keyed("b1", "b", 7, shared),
	} {
		c.Push(r)
	}
	want := "a w=2 v=0 n=6 owed=0 ready=true shared=[a1 a2 a3] pin w1/-1 blocked=false [q1] pin w1/0 blocked=false [p1 p2]\n" +
		"b w=1 v=0 n=1 owed=0 ready=true shared=[b1]\n"
	if got := describe(c); got != want {
		t.Fatalf("after the pushes:\ngot  %swant %s", got, want)
	}
	if isl, cached := c.Tokens(); isl != 7 || cached != 0 || c.Len() != 7 || c.Empty() {
		t.Fatalf("got isl %d cached %d len %d, want 7, 0, 7", isl, cached, c.Len())
	}

	// Key a's shared head is gated and w1 is busy: a is set aside whole, b
	// (its shared head allow-listed, so constrained) blocked.
	chk.targets[shared] = true
	chk.targets[pin("w1", 0)] = true
	chk.targets[pin("w1", request.AnyRank)] = true
	c.Push(func() *request.Snapshot {
		r := keyed("b0", "b", 0, shared)
		r.Route = &request.Route{Allowed: []string{"w2"}}
		return r
	}())
	if _, ok := c.Candidate(); ok {
		t.Fatal("want no candidate: every head is blocked")
	}
	want = "a w=2 v=0 n=6 owed=0 ready=false sharedgated=[a1 a2 a3] pin w1/-1 blocked=true [q1] pin w1/0 blocked=true [p1 p2]\n" +
		"b w=1 v=0 n=2 owed=0 ready=false sharedblocked=[b0 b1]\n"
	if got := describe(c); got != want {
		t.Fatalf("all blocked:\ngot  %swant %s", got, want)
	}
	if pinned, blocked := c.Lanes(); pinned != 2 || blocked != 2 {
		t.Fatalf("got %d pinned lanes, %d blocked; want 2 and 2", pinned, blocked)
	}

	// Everything opens; RecheckAll returns every lane. Both keys are at v 0:
	// a, backlogged first, supplies its best request.
	clear(chk.targets)
	c.RecheckAll()
	if pinned, blocked := c.Lanes(); pinned != 2 || blocked != 0 {
		t.Fatalf("after RecheckAll: got %d pinned lanes, %d blocked; want 2 and 0", pinned, blocked)
	}
	if _, ok := c.Candidate(); !ok || c.cand.ID != "a1" {
		t.Fatalf("want a1 (key a, the older backlog, strict and score equal, lowest seq)")
	}
	c.Pop()
	if v := c.VirtualTime(); v != 0 {
		t.Fatalf("got virtual time %v, want 0 (a was served at v 0)", v)
	}
	// Then the least served key each time, the older backlog on a tie: b0
	// (b 0 -> 1), a2 (a 0.5 -> 1), a3 (a tie, a is older: 1 -> 1.5), b1
	// (b 1 -> 2). b is then idle but owed two settlements: kept.
	var order []string
	for range 4 {
		if _, ok := c.Candidate(); !ok {
			t.Fatal("want a candidate")
		}
		c.Pop()
		order = append(order, c.Last().ID)
	}
	if got := strings.Join(order, " "); got != "b0 a2 a3 b1" {
		t.Fatalf("got order %s, want b0 a2 a3 b1", got)
	}
	got := map[string]float64{}
	c.EachKey(func(name string, service, _ float64, queued int) bool {
		got[name] = service
		return true
	})
	if len(got) != 2 || got["a"] != 1.5 || got["b"] != 2 {
		t.Fatalf("EachKey: got %v, want a 1.5 (three of cost 1 at weight 2), b 2", got)
	}
	want = "a w=2 v=1.5 n=3 owed=3 ready=true shared=[] pin w1/-1 blocked=false [q1] pin w1/0 blocked=false [p1 p2]\n" +
		"b w=1 v=2 n=0 owed=2 ready=false shared=[]\n"
	if got := describe(c); got != want {
		t.Fatalf("after five dispatches:\ngot  %swant %s", got, want)
	}
	c.Release("b")
	c.Release("b")
	if _, ok := c.Service("b"); ok || c.Keys() != 1 {
		t.Fatalf("b still tracked after both its dispatches were released (keys %d)", c.Keys())
	}
	// A new weight applies to what is charged from now on.
	c.SetKeyConfig(KeyConfig{Weights: map[string]float64{"a": 4}})
	if ks := c.Inspect(); len(ks) != 1 || ks[0].Weight != 4 || ks[0].Service != 1.5 {
		t.Fatalf("after the weight change: got %+v, want a with weight 4 and service 1.5 kept", ks)
	}
}
