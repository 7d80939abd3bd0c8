package lanes

import (
	"fmt"
	"slices"
	"testing"

	"fairdispatch/request"
	"pgregory.net/rapid"
)

// refClass is a deliberately naive class: one list per lane, kept sorted by
// Before, and a candidate found by looking at every lane head each time. A lane
// whose head the checker refuses is simply skipped; it has no blocked set and
// no index.
type refClass struct {
	check *fakeCheck
	lanes map[request.Target][]*request.Snapshot
}

func (m *refClass) push(r *request.Snapshot) {
	l := append(m.lanes[r.Pin], r)
	slices.SortFunc(l, request.Compare)
	m.lanes[r.Pin] = l
}

func (m *refClass) remove(r *request.Snapshot) {
	l := m.lanes[r.Pin]
	i := slices.Index(l, r)
	if i < 0 {
		return
	}
	l = slices.Delete(l, i, i+1)
	if len(l) == 0 {
		delete(m.lanes, r.Pin)
	} else {
		m.lanes[r.Pin] = l
	}
}

// candidate returns the best dispatchable lane head, or nil. It asks the
// checker's state directly, so it does not count as Checker calls.
func (m *refClass) candidate() *request.Snapshot {
	var best *request.Snapshot
	for _, l := range m.lanes {
		h := l[0]
		if m.check.targets[h.Pin] || m.check.ids[h.ID] {
			continue
		}
		if best == nil || h.Before(best) {
			best = h
		}
	}
	return best
}

func (m *refClass) all() []*request.Snapshot {
	var out []*request.Snapshot
	for _, l := range m.lanes {
		out = append(out, l...)
	}
	return out
}

// TestModel runs random pushes, removes, candidate and pop calls and target
// blocks against both the real class and refClass and checks that they agree on
// every candidate, and that no request is lost or duplicated.
//
// Recheck semantics: the real class re-examines a blocked lane only on Recheck,
// so every toggle of a pinned target's flag is followed by Recheck of its worker
// (or RecheckAll); refClass needs nothing.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		workers := []string{"a", "b", "c"}
		genTarget := rapid.Custom(func(t *rapid.T) request.Target {
			if rapid.IntRange(0, 2).Draw(t, "unpinned") == 0 {
				return shared
			}
			return pin(rapid.SampledFrom(workers).Draw(t, "worker"),
				int32(rapid.IntRange(-1, 1).Draw(t, "rank")))
		})
		chk := newFakeCheck()
		c := NewKeyed(chk, KeyConfig{})
		m := &refClass{check: chk, lanes: map[request.Target][]*request.Snapshot{}}
		var (
			seq    uint64
			pushed []*request.Snapshot
			popped = map[*request.Snapshot]int{} // times each request was popped
			gone   = map[*request.Snapshot]bool{}
		)
		checkCand := func(t *rapid.T, want *request.Snapshot) {
			cost, ok := c.Candidate()
			switch {
			case want == nil && ok:
				t.Fatalf("got candidate %s (cost %d), want none", c.cand.ID, cost)
			case want != nil && !ok:
				t.Fatalf("got no candidate, want %s", want.ID)
			case want != nil && c.cand != want:
				t.Fatalf("got candidate %s, want %s", c.cand.ID, want.ID)
			case want != nil && cost != want.DRRCost():
				t.Fatalf("got cost %d, want %d", cost, want.DRRCost())
			}
		}
		push := func(t *rapid.T) {
			seq++
			r := mk(fmt.Sprint(seq), seq,
				uint32(rapid.IntRange(0, 1).Draw(t, "strict")),
				float64(rapid.IntRange(-3, 3).Draw(t, "score")), // ties are likely
				genTarget.Draw(t, "target"))
			r.ISL = rapid.Uint64Range(1, 1000).Draw(t, "isl")
			r.Cached = rapid.Uint64Range(0, r.ISL).Draw(t, "cached")
			r.Cost = max(1, r.ISL-r.Cached)
			r.Charged = rapid.IntRange(0, 9).Draw(t, "charged") == 0
			c.Push(r)
			m.push(r)
			pushed = append(pushed, r)
		}
		// Start from a backlog, so that the ~30 random steps of a run meet lanes
		// several requests deep.
		for range rapid.IntRange(0, 40).Draw(t, "backlog") {
			push(t)
		}
		t.Repeat(map[string]func(*rapid.T){
			"push":      push,
			"push more": push, // twice the weight of the other steps
			"remove": func(t *rapid.T) {
				if len(pushed) == 0 {
					t.Skip("nothing pushed")
				}
				// Sometimes a request already popped or removed: a no-op.
				r := rapid.SampledFrom(pushed).Draw(t, "request")
				c.Remove(r)
				m.remove(r)
				gone[r] = true
			},
			"candidate": func(t *rapid.T) {
				checkCand(t, m.candidate())
			},
			"pop": func(t *rapid.T) {
				want := m.candidate()
				checkCand(t, want)
				if want == nil {
					t.Skip("nothing dispatchable")
				}
				c.Pop()
				if got := c.Last(); got != want {
					t.Fatalf("got Last %s, want %s", got.ID, want.ID)
				}
				m.remove(want)
				popped[want]++
				if gone[want] {
					t.Fatalf("popped %s, which had already left", want.ID)
				}
				gone[want] = true
			},
			"toggle": func(t *rapid.T) {
				tg := genTarget.Draw(t, "target")
				chk.targets[tg] = !chk.targets[tg]
				if !tg.Pinned() {
					return // the shared head is checked on every call
				}
				if rapid.Bool().Draw(t, "all") {
					c.RecheckAll()
				} else {
					c.Recheck(tg.Worker)
				}
			},
			"recheck": func(t *rapid.T) {
				// A recheck with no change in the worker's state changes no answer.
				c.Recheck(rapid.SampledFrom(workers).Draw(t, "worker"))
			},
			"": func(t *rapid.T) {
				if err := invariants(c); err != nil {
					t.Fatal(err)
				}
				want := m.all()
				var got []*request.Snapshot
				c.Each(func(r *request.Snapshot) bool { got = append(got, r); return true })
				if len(got) != len(want) || c.Len() != len(want) {
					t.Fatalf("got %d requests by Each, Len %d, want %d", len(got), c.Len(), len(want))
				}
				seen := map[*request.Snapshot]bool{}
				for _, r := range got {
					if seen[r] {
						t.Fatalf("request %s queued twice", r.ID)
					}
					seen[r] = true
				}
				for _, r := range want {
					if !seen[r] {
						t.Fatalf("request %s lost", r.ID)
					}
				}
				// Every pushed request is queued, or left exactly once.
				for _, r := range pushed {
					if seen[r] == gone[r] {
						t.Fatalf("request %s: queued %v, gone %v", r.ID, seen[r], gone[r])
					}
					if popped[r] > 1 {
						t.Fatalf("request %s popped %d times", r.ID, popped[r])
					}
				}
				if pinned, _ := c.Lanes(); pinned != len(m.lanes)-btoi(len(m.lanes[shared]) > 0) {
					t.Fatalf("got %d pinned lanes, want %d", pinned, len(m.lanes)-btoi(len(m.lanes[shared]) > 0))
				}
			},
		})
	})
}
