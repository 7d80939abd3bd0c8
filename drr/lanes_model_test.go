package drr

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/lanes"
	"fairdispatch/request"
)

// This property test runs the real arbiter over real class queues (lanes.Keyed, one key), with
// pinned lanes and per-worker blocked states, against a naive model of both:
// each lane a sorted list, a blocked lane simply skipped, and DRR credit added
// one virtual round at a time.

var workerIDs = []string{"w0", "w1", "w2"}

// blockState is the fake gate: a pinned head is dispatchable unless its
// worker is blocked; a shared head unless its class's shared lane is blocked.
type blockState struct {
	worker map[string]bool
	shared []bool
}

func (b *blockState) Dispatchable(r *request.Snapshot) bool {
	if r.Pin.Pinned() {
		return !b.worker[r.Pin.Worker]
	}
	return !b.shared[r.Class]
}

// modelClass is one class of the naive model: every queued request, in a list.
type modelClass struct {
	reqs []*request.Snapshot
}

// candidate is the best head of an unblocked lane: lanes are the shared one and
// one per pin target; a lane's head is its best request.
func (m *modelClass) candidate(b *blockState) *request.Snapshot {
	heads := map[request.Target]*request.Snapshot{}
	for _, r := range m.reqs {
		if h, ok := heads[r.Pin]; !ok || r.Before(h) {
			heads[r.Pin] = r
		}
	}
	var best *request.Snapshot
	for _, h := range heads {
		if b.Dispatchable(h) && (best == nil || h.Before(best)) {
			best = h
		}
	}
	return best
}

// modelArbiter is docs/design.md, DRR with credit granted one virtual round at a time.
type modelArbiter struct {
	quanta, deficit []uint64
	cursor, carry   int
}

func (a *modelArbiter) next(cs []*modelClass, b *blockState) *request.Snapshot {
	n := len(cs)
	queued := slices.ContainsFunc(cs, func(c *modelClass) bool { return len(c.reqs) > 0 })
	if !queued {
		a.carry = -1
		return nil
	}
	cand := make([]*request.Snapshot, n)
	for k, c := range cs {
		cand[k] = c.candidate(b)
	}
	if k := a.carry; k >= 0 && cand[k] != nil && cand[k].Cost <= a.deficit[k] {
		return a.take(cs, k, cand[k])
	}
	any := false
	for i := range n {
		k := (a.cursor + i) % n
		switch {
		case len(cs[k].reqs) == 0:
			a.deficit[k] = 0
		case cand[k] == nil:
		case cand[k].Cost <= a.deficit[k]:
			return a.take(cs, k, cand[k])
		default:
			any = true
			a.deficit[k] += a.quanta[k]
			if cand[k].Cost <= a.deficit[k] {
				return a.take(cs, k, cand[k])
			}
		}
	}
	if !any {
		return nil
	}
	for {
		for k := range n {
			if cand[k] != nil {
				a.deficit[k] += a.quanta[k]
			}
		}
		for i := range n {
			k := (a.cursor + i) % n
			if cand[k] != nil && cand[k].Cost <= a.deficit[k] {
				return a.take(cs, k, cand[k])
			}
		}
	}
}

func (a *modelArbiter) take(cs []*modelClass, k int, r *request.Snapshot) *request.Snapshot {
	c := cs[k]
	c.reqs = slices.DeleteFunc(c.reqs, func(x *request.Snapshot) bool { return x == r })
	a.cursor = (k + 1) % len(cs)
	a.deficit[k] -= r.Cost
	switch {
	case len(c.reqs) == 0:
		a.deficit[k], a.carry = 0, -1
	case a.deficit[k] > 0:
		a.carry = k
	default:
		a.carry = -1
	}
	return r
}

func TestArbiterOverLanesMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "classes")
		quanta := make([]uint64, n)
		for k := range quanta {
			quanta[k] = rapid.Uint64Range(1, 40).Draw(t, fmt.Sprint("quantum", k))
		}
		b := &blockState{worker: map[string]bool{}, shared: make([]bool, n)}
		real := make([]*lanes.Keyed, n)
		qs := make([]Queue, n)
		model := make([]*modelClass, n)
		for k := range real {
			real[k] = lanes.NewKeyed(b, lanes.KeyConfig{})
			qs[k] = real[k]
			model[k] = &modelClass{}
		}
		arb := New(quanta)
		ref := &modelArbiter{quanta: quanta, deficit: make([]uint64, n), carry: -1}
		var seq uint64
		queued := map[*request.Snapshot]bool{}

		step := func(label string) {
			got, ok := arb.Next(qs)
			want := ref.next(model, b)
			if !ok {
				if want != nil {
					t.Fatalf("%s: real took nothing, model took %d (class %d)", label, want.Seq, want.Class)
				}
				return
			}
			r := real[got].Last()
			if want == nil || r != want {
				t.Fatalf("%s: real took seq %d from class %d, model took %v", label, r.Seq, got, want)
			}
			if !queued[r] {
				t.Fatalf("%s: seq %d taken twice or never queued", label, r.Seq)
			}
			delete(queued, r)
			for k := range n {
				if arb.Deficit(k) != int64(ref.deficit[k]) {
					t.Fatalf("%s: class %d deficit %d, model %d", label, k, arb.Deficit(k), ref.deficit[k])
				}
			}
		}

		for i := range rapid.IntRange(1, 150).Draw(t, "ops") {
			label := fmt.Sprint("op ", i)
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1: // enqueue
				seq++
				k := rapid.IntRange(0, n-1).Draw(t, "class")
				r := &request.Snapshot{
					Class: k, Seq: seq, Index: -1,
					Cost:   rapid.Uint64Range(1, 200).Draw(t, "cost"),
					Strict: uint32(rapid.IntRange(0, 1).Draw(t, "strict")),
					Score:  float64(rapid.IntRange(0, 3).Draw(t, "score")),
				}
				if p := rapid.IntRange(-1, len(workerIDs)-1).Draw(t, "pin"); p >= 0 {
					r.Pin = request.Target{Worker: workerIDs[p], Rank: int32(rapid.IntRange(-1, 1).Draw(t, "rank"))}
				}
				real[k].Push(r)
				model[k].reqs = append(model[k].reqs, r)
				queued[r] = true
			case 2: // block or unblock a worker; an unblocked worker's lanes are re-checked
				w := rapid.SampledFrom(workerIDs).Draw(t, "worker")
				b.worker[w] = !b.worker[w]
				if !b.worker[w] {
					for _, c := range real {
						c.Recheck(w)
					}
				}
			case 3: // block or unblock a class's shared lane
				k := rapid.IntRange(0, n-1).Draw(t, "shared")
				b.shared[k] = !b.shared[k]
			default:
				step(label)
			}
		}
		// Unblock everything: every request left must come out exactly once.
		clear(b.worker)
		clear(b.shared)
		for _, c := range real {
			c.RecheckAll()
		}
		for i := 0; len(queued) > 0; i++ {
			if i > 10000 {
				t.Fatalf("%d requests never dispatched", len(queued))
			}
			step(fmt.Sprint("drain ", i))
		}
	})
}
