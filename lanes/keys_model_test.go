package lanes

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"fairdispatch/request"
	"pgregory.net/rapid"
)

// refKey is one key of refKeyed.
type refKey struct {
	v, weight float64
	order     uint64
	owed      int
	lanes     map[request.Target][]*request.Snapshot
}

func (k *refKey) n() int {
	n := 0
	for _, l := range k.lanes {
		n += len(l)
	}
	return n
}

// refKeyed is a deliberately naive keyed class: per key, one sorted list per
// lane; the candidate is found by looking at every key and every lane head each
// time (docs/design.md, Fairness keys), with no heaps, no blocked sets and no
// gated list.
type refKeyed struct {
	check   *fakeCheck
	weights map[string]float64
	keys    map[string]*refKey
	vnow    float64
	order   uint64
}

func (m *refKeyed) push(r *request.Snapshot) {
	k := m.keys[r.Key]
	if k == nil {
		k = &refKey{v: m.vnow, weight: m.weights[r.Key], lanes: map[request.Target][]*request.Snapshot{}}
		m.keys[r.Key] = k
	}
	if k.n() == 0 {
		k.v = max(k.v, m.vnow)
		m.order++
		k.order = m.order
	}
	l := append(k.lanes[r.Pin], r)
	slices.SortFunc(l, request.Compare)
	k.lanes[r.Pin] = l
}

func (m *refKeyed) remove(r *request.Snapshot) bool {
	k := m.keys[r.Key]
	if k == nil {
		return false
	}
	l := k.lanes[r.Pin]
	i := slices.Index(l, r)
	if i < 0 {
		return false
	}
	l = slices.Delete(l, i, i+1)
	if len(l) == 0 {
		delete(k.lanes, r.Pin)
	} else {
		k.lanes[r.Pin] = l
	}
	return true
}

func (m *refKeyed) forget(name string) {
	if k := m.keys[name]; k != nil && k.n() == 0 && k.owed == 0 {
		delete(m.keys, name)
	}
}

// candidate returns the best dispatchable request of the key with the least
// (v, order) among keys with one, and that key's name. A key whose requests are
// all blocked keeps its service, whatever happens meanwhile.
func (m *refKeyed) candidate() (*request.Snapshot, string) {
	var best *request.Snapshot
	var bestKey string
	var bk *refKey
	for name, k := range m.keys {
		var kb *request.Snapshot
		for _, l := range k.lanes {
			if h := l[0]; !m.check.targets[h.Pin] && (kb == nil || h.Before(kb)) {
				kb = h
			}
		}
		if kb == nil {
			continue
		}
		if bk == nil || k.v < bk.v || (k.v == bk.v && k.order < bk.order) {
			best, bestKey, bk = kb, name, k
		}
	}
	return best, bestKey
}

// TestKeyedModel runs random pushes, removes, pops, settlements and blockings
// against Keyed and refKeyed and checks that they agree on every candidate and
// every key's service, and that no request is lost or duplicated.
func TestKeyedModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"a", "b", "c", "d"}
		workers := []string{"x", "y"}
		weights := map[string]float64{}
		for _, n := range names {
			weights[n] = float64(rapid.IntRange(1, 8).Draw(t, "weight")) / 2
		}
		genTarget := rapid.Custom(func(t *rapid.T) request.Target {
			if rapid.IntRange(0, 2).Draw(t, "unpinned") > 0 {
				return shared
			}
			return pin(rapid.SampledFrom(workers).Draw(t, "worker"), int32(rapid.IntRange(-1, 0).Draw(t, "rank")))
		})
		chk := newFakeCheck()
		c := NewKeyed(chk, KeyConfig{Weights: weights})
		m := &refKeyed{check: chk, weights: weights, keys: map[string]*refKey{}}
		var (
			seq    uint64
			queued []*request.Snapshot
			popped []*request.Snapshot // charged and owed
		)
		push := func(t *rapid.T) {
			seq++
			r := mk(fmt.Sprint(seq), seq, uint32(rapid.IntRange(0, 1).Draw(t, "strict")),
				float64(rapid.IntRange(-3, 3).Draw(t, "score")), genTarget.Draw(t, "target"))
			r.Key = rapid.SampledFrom(names).Draw(t, "key")
			r.Cost = rapid.Uint64Range(1, 100).Draw(t, "cost")
			c.Push(r)
			m.push(r)
			queued = append(queued, r)
		}
		checkCand := func(t *rapid.T) *request.Snapshot {
			want, wk := m.candidate()
			cost, ok := c.Candidate()
			switch {
			case want == nil && ok:
				t.Fatalf("got candidate %s, want none", c.cand.ID)
			case want != nil && !ok:
				t.Fatalf("got no candidate, want %s of key %s", want.ID, wk)
			case want != nil && c.cand != want:
				t.Fatalf("got candidate %s of key %s, want %s of key %s", c.cand.ID, c.cand.Key, want.ID, wk)
			case want != nil && cost != want.DRRCost():
				t.Fatalf("got cost %d, want %d", cost, want.DRRCost())
			}
			return want
		}
		for range rapid.IntRange(0, 30).Draw(t, "backlog") {
			push(t)
		}
		t.Repeat(map[string]func(*rapid.T){
			"push":      push,
			"push more": push,
			"remove": func(t *rapid.T) {
				r := drawOut(t, &queued, "nothing queued")
				c.Remove(r)
				if !m.remove(r) {
					t.Fatalf("model lost %s", r.ID)
				}
				m.forget(r.Key)
			},
			"pop": func(t *rapid.T) {
				want := checkCand(t)
				if want == nil {
					t.Skip("nothing dispatchable")
				}
				c.Pop()
				if c.Last() != want {
					t.Fatalf("got Last %s, want %s", c.Last().ID, want.ID)
				}
				k := m.keys[want.Key]
				m.remove(want)
				m.vnow = max(m.vnow, k.v)
				k.v += float64(want.Cost) / k.weight
				k.owed++
				m.forget(want.Key)
				queued = slices.DeleteFunc(queued, func(x *request.Snapshot) bool { return x == want })
				popped = append(popped, want)
			},
			"settle": func(t *rapid.T) {
				r := drawOut(t, &popped, "nothing owed")
				delta := rapid.Int64Range(-int64(r.Cost), 300).Draw(t, "delta")
				k := m.keys[r.Key]
				if !c.Settle(r.Key, delta) {
					t.Fatalf("settle %s: key %s not tracked", r.ID, r.Key)
				}
				k.v += float64(delta) / k.weight
				k.owed--
				m.forget(r.Key)
			},
			"toggle": func(t *rapid.T) {
				tg := genTarget.Draw(t, "target")
				chk.targets[tg] = !chk.targets[tg]
				if tg.Pinned() {
					c.Recheck(tg.Worker)
				}
			},
			"candidate": func(t *rapid.T) { checkCand(t) },
			"": func(t *rapid.T) {
				if c.Len() != len(queued) {
					t.Fatalf("got Len %d, want %d", c.Len(), len(queued))
				}
				seen := map[*request.Snapshot]bool{}
				c.Each(func(r *request.Snapshot) bool { seen[r] = true; return true })
				for _, r := range queued {
					if !seen[r] {
						t.Fatalf("request %s lost", r.ID)
					}
				}
				if len(seen) != len(queued) {
					t.Fatalf("got %d requests by Each, want %d", len(seen), len(queued))
				}
				if c.Keys() != len(m.keys) {
					t.Fatalf("got %d keys tracked, want %d", c.Keys(), len(m.keys))
				}
				for name, k := range m.keys {
					if v, ok := c.Service(name); !ok || math.Abs(v-k.v) > 1e-9 {
						t.Fatalf("key %s: got service %v (tracked %v), want %v", name, v, ok, k.v)
					}
				}
				if err := keyedInvariants(c); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}

// keyedInvariants checks heap positions and order, that a key is in the key
// heap exactly when it has a lane not known to be blocked, and the totals.
func keyedInvariants(c *Keyed) error {
	n := 0
	for i, e := range c.keys {
		k := e.k
		if int(k.pos) != i {
			return fmt.Errorf("key heap: %s at %d has pos %d", k.name, i, k.pos)
		}
		if e.v != k.v || e.order != k.order {
			return fmt.Errorf("key heap: %s entry (%v, %d) differs from its key (%v, %d)", k.name, e.v, e.order, k.v, k.order)
		}
		if p := (i - 1) / 2; i > 0 && (byService{}).Less(e, c.keys[p]) {
			return fmt.Errorf("key heap: %s ranks before its parent", k.name)
		}
	}
	for name, k := range c.byName {
		if k.name != name {
			return fmt.Errorf("key %s filed as %s", k.name, name)
		}
		open := len(k.ready) > 0 || (len(k.shared) > 0 && k.sblock == sOpen)
		if (k.pos >= 0) != open {
			return fmt.Errorf("key %s: in heap %v, has an open lane %v", name, k.pos >= 0, open)
		}
		if k.n == 0 && k.owed == 0 {
			return fmt.Errorf("key %s kept with nothing queued or owed", name)
		}
		n += len(k.shared)
		switch k.sblock {
		case sGated:
			if c.gated[k.spos] != k {
				return fmt.Errorf("key %s: not at its place in the gated list", name)
			}
		case sBlocked:
			if c.sblocked[k.spos] != k {
				return fmt.Errorf("key %s: not at its place in the blocked list", name)
			}
		}
		for i, r := range k.shared {
			if r.Index != i {
				return fmt.Errorf("key %s: request %s at %d has Index %d", name, r.ID, i, r.Index)
			}
		}
	}
	for kt, l := range c.pinned {
		n += len(l.q)
		if l.owner == nil || l.owner.name != kt.key || len(l.q) == 0 {
			return fmt.Errorf("lane %v: owner or size wrong", kt)
		}
		indexed := l.pos >= 0 && l.owner.ready[l.pos] == l
		if indexed == l.blocked {
			return fmt.Errorf("lane %v: indexed %v blocked %v", kt, indexed, l.blocked)
		}
	}
	if n != c.n {
		return fmt.Errorf("got n %d, counted %d", c.n, n)
	}
	return nil
}

// drawOut takes an element of *s that t draws out of it and returns it; with
// *s empty it skips the action, saying why.
func drawOut[E any](t *rapid.T, s *[]E, why string) E {
	if len(*s) == 0 {
		t.Skip(why)
	}
	i := rapid.IntRange(0, len(*s)-1).Draw(t, "i")
	e := (*s)[i]
	*s = slices.Delete(*s, i, i+1)
	return e
}
