package lanes

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"fairdispatch/request"
)

// TestQueueOrder pushes requests in every order of a small set and checks that
// the heap pops them sorted by Before, with positions kept up to date.
func TestQueueOrder(t *testing.T) {
	base := []*request.Snapshot{
		mk("a", 1, 0, 5, shared), mk("b", 2, 1, -100, shared), mk("c", 3, 0, 5, shared),
		mk("d", 4, 0, 7, shared), mk("e", 5, 1, -100, shared),
	}
	want := []string{"b", "e", "d", "a", "c"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		in := slices.Clone(base)
		rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		var q queue
		for _, r := range in {
			q.Push(r)
		}
		var got []string
		for len(q) > 0 {
			r := q.Remove(0)
			if r.Index != -1 {
				t.Fatalf("removed %s: got Index %d, want -1", r.ID, r.Index)
			}
			for i, x := range q {
				if x.Index != i {
					t.Fatalf("%s at %d: got Index %d", x.ID, i, x.Index)
				}
			}
			got = append(got, r.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pushed %v: got order %v, want %v", ids(in), got, want)
		}
	}
}

func ids(rs []*request.Snapshot) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// TestRandomOps runs random pushes, removes of arbitrary requests, pops, blocks
// and rechecks on a class and checks every invariant (Snapshot.Index, heap order,
// lane bookkeeping, totals) after each one.
func TestRandomOps(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			chk := newFakeCheck()
			c := NewKeyed(chk, KeyConfig{})
			targets := []request.Target{shared, shared, pin("a", 0), pin("a", 1), pin("a", request.AnyRank),
				pin("b", 0), pin("c", request.AnyRank)}
			var queued []*request.Snapshot
			seq := uint64(0)
			for step := range 2000 {
				switch x := rng.IntN(10); {
				case x < 4:
					seq++
					r := mk(fmt.Sprint(seq), seq, uint32(rng.IntN(2)), float64(rng.IntN(5)), targets[rng.IntN(len(targets))])
					r.ISL = uint64(rng.IntN(1000))
					r.Cached = uint64(rng.IntN(int(r.ISL) + 1))
					c.Push(r)
					queued = append(queued, r)
				case x < 6 && len(queued) > 0:
					i := rng.IntN(len(queued))
					c.Remove(queued[i])
					queued = slices.Delete(queued, i, i+1)
				case x < 8:
					if _, ok := c.Candidate(); ok {
						c.Pop()
						r := c.Last()
						i := slices.Index(queued, r)
						if i < 0 {
							t.Fatalf("step %d: popped %s, not queued", step, r.ID)
						}
						queued = slices.Delete(queued, i, i+1)
					}
				case x < 9:
					tg := targets[rng.IntN(len(targets))]
					chk.targets[tg] = !chk.targets[tg]
				default:
					if rng.IntN(2) == 0 {
						c.RecheckAll()
					} else {
						c.Recheck(targets[rng.IntN(len(targets))].Worker)
					}
				}
				if err := invariants(c); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if got, want := c.Len(), len(queued); got != want {
					t.Fatalf("step %d: got Len %d, want %d", step, got, want)
				}
			}
		})
	}
}
