package filters_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// naiveGated is the reference for docs/design.md, Gates: walk every live worker and rank,
// keep the eligible ones, count the busy ones, apply the rule. It shares only
// Gate.Busy (checked on its own by TestGateBusy) with the code under test.
func naiveGated(reg *workers.Registry, gate filters.Gate, r *request.Snapshot) bool {
	eligible, busy := 0, 0
	for _, w := range reg.All() {
		if r.Pin.Pinned() && w.ID != r.Pin.Worker {
			continue
		}
		if r.Route != nil {
			if r.Route.Allowed != nil && !slices.Contains(r.Route.Allowed, w.ID) {
				continue
			}
			ok := true
			for _, t := range r.Route.Required {
				ok = ok && slices.Contains(w.Taints, t)
			}
			if !ok {
				continue
			}
		}
		for i := range w.Ranks {
			rank := int32(w.Start) + int32(i)
			if r.Pin.Pinned() && r.Pin.Rank != request.AnyRank && rank != r.Pin.Rank {
				continue
			}
			eligible++
			if gate.Busy(w, &w.Ranks[i]) {
				busy++
			}
		}
	}
	if eligible == 0 {
		return false
	}
	if gate.Ratio != nil {
		return float64(busy) >= *gate.Ratio*float64(eligible)
	}
	return busy == eligible
}

var (
	modelIDs    = []string{"a", "b", "c", "d", "e"}
	modelTaints = []string{"t1", "t2", "t3"}
)

func genGate(t *rapid.T, label string) filters.Gate {
	var g filters.Gate
	if rapid.Bool().Draw(t, label+".hasThreshold") {
		g.Threshold = u64(rapid.Uint64Range(0, 300).Draw(t, label+".threshold"))
	}
	if rapid.Bool().Draw(t, label+".hasFrac") {
		g.Frac = f64(float64(rapid.IntRange(0, 100).Draw(t, label+".frac")) / 200)
	}
	if rapid.Bool().Draw(t, label+".hasRatio") {
		g.Ratio = f64(float64(rapid.IntRange(1, 10).Draw(t, label+".ratio")) / 10)
	}
	return g
}

func genSubset(t *rapid.T, from []string, label string) []string {
	var s []string
	for _, x := range from {
		if rapid.Bool().Draw(t, label+"."+x) {
			s = append(s, x)
		}
	}
	return s
}

func genRequest(t *rapid.T) *request.Snapshot {
	r := &request.Snapshot{}
	if rapid.IntRange(0, 2).Draw(t, "pinned") == 0 {
		r.Pin = request.Target{Worker: rapid.SampledFrom(modelIDs).Draw(t, "pin.worker"),
			Rank: int32(rapid.IntRange(-1, 6).Draw(t, "pin.rank"))}
	}
	switch rapid.IntRange(0, 3).Draw(t, "route") {
	case 1:
		r.Route = &request.Route{Allowed: genSubset(t, append(slices.Clone(modelIDs), "dead"), "allowed")}
		if r.Route.Allowed == nil {
			r.Route.Allowed = []string{}
		}
	case 2:
		r.Route = &request.Route{Required: genSubset(t, modelTaints, "required")}
	case 3:
		r.Route = &request.Route{Allowed: genSubset(t, modelIDs, "allowed"), Required: genSubset(t, modelTaints, "required")}
	}
	if r.Route != nil && rapid.Bool().Draw(t, "preferred") {
		r.Route.Preferred = []request.Taint{{Name: "t1", Weight: 1}}
	}
	return r
}

// TestGatesModel drives a registry and its Gates through random reports,
// bookings, releases, exclusions and expiries, calling Update and Remove as
// the scheduler must, and checks after every step that the O(1) counts agree
// with a brute-force recount (docs/design.md, DRR; docs/design.md, Gates).
func TestGatesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gates := make([]filters.Gate, rapid.IntRange(1, 4).Draw(t, "classes"))
		for k := range gates {
			gates[k] = genGate(t, fmt.Sprintf("gate%d", k))
		}
		reg := workers.New()
		reg.MaxWorkers = rapid.IntRange(0, 5).Draw(t, "maxWorkers")
		g := filters.NewGates(reg, gates)
		now := int64(0)
		var seqs []uint64

		live := func(t *rapid.T) *workers.Worker {
			if reg.Len() == 0 {
				t.Skip("no live worker")
			}
			return rapid.SampledFrom(reg.All()).Draw(t, "worker")
		}

		t.Repeat(map[string]func(*rapid.T){
			"report": func(t *rapid.T) {
				id := rapid.SampledFrom(modelIDs).Draw(t, "id")
				size := rapid.IntRange(1, 3).Draw(t, "size")
				r := workers.Report{
					WorkerID: id,
					DPStart:  uint32(rapid.IntRange(0, 3).Draw(t, "start")),
					DPSize:   uint32(size),
					TTLms:    rapid.Uint64Range(100, 1000).Draw(t, "ttl"),
					Draining: rapid.IntRange(0, 7).Draw(t, "draining") == 0,
					Taints:   genSubset(t, modelTaints, "taints"),
					Instance: rapid.SampledFrom([]string{"i0", "i1"}).Draw(t, "instance"),
				}
				if rapid.Bool().Draw(t, "knownBatched") {
					r.MaxBatched = rapid.Uint64Range(1, 1000).Draw(t, "batched")
				}
				if rapid.Bool().Draw(t, "hasCapacity") {
					r.MaxActive = rapid.Uint64Range(1, 3).Draw(t, "capacity")
				}
				if rapid.Bool().Draw(t, "hasSeen") {
					r.SeenSeq, r.HasSeenSeq = rapid.Uint64Range(0, 30).Draw(t, "seen"), true
				}
				for i := range size {
					if rapid.Bool().Draw(t, "reported") {
						r.Ranks = append(r.Ranks, workers.RankLoad{Rank: r.DPStart + uint32(i),
							ActivePrefillTokens: rapid.Uint64Range(0, 400).Draw(t, "prefill"),
							ActiveRequests:      rapid.Uint64Range(0, 3).Draw(t, "requests")})
					}
				}
				if w, _, ok := reg.Apply(now, r); ok {
					g.Update(w)
				}
			},
			"book": func(t *rapid.T) {
				w := live(t)
				rank := int32(w.Start) + int32(rapid.IntRange(0, len(w.Ranks)-1).Draw(t, "rank"))
				seqs = append(seqs, reg.Book(now, w, rank, rapid.Uint64Range(0, 200).Draw(t, "cost")))
				g.Update(w)
			},
			"unbook": func(t *rapid.T) {
				w := live(t)
				if len(seqs) == 0 {
					t.Skip("nothing booked")
				}
				reg.Unbook(w, rapid.SampledFrom(seqs).Draw(t, "seq"))
				g.Update(w)
			},
			"exclude": func(t *rapid.T) {
				w := live(t)
				w.Excluded = true
				g.Update(w)
			},
			"refused": func(t *rapid.T) {
				w := live(t)
				if len(seqs) == 0 {
					t.Skip("nothing booked")
				}
				seq := rapid.SampledFrom(seqs).Draw(t, "seq")
				reg.Unbook(w, seq)
				reg.Refused(now, w, seq)
				g.Update(w)
			},
			"accepted": func(t *rapid.T) {
				w := live(t)
				if reg.Accepted(w) {
					g.Update(w)
				}
			},
			"tick": func(t *rapid.T) {
				now += rapid.Int64Range(0, 700).Draw(t, "advance") * 1e6
				for _, w := range reg.Expire(now, nil) {
					g.Remove(w)
				}
				for _, w := range reg.Aged() { // old bookings dropped, exclusions ended
					g.Update(w)
				}
			},
			"": func(t *rapid.T) {
				ranks := 0
				for _, w := range reg.All() {
					ranks += len(w.Ranks)
				}
				for k, gate := range gates {
					want := naiveGated(reg, gate, &request.Snapshot{})
					if got := g.Gated(k); got != want {
						t.Fatalf("Gated(%d): got %v, want %v", k, got, want)
					}
					busy := 0
					for _, w := range reg.All() {
						for i := range w.Ranks {
							busy += b2i(gate.Busy(w, &w.Ranks[i]))
						}
					}
					if got, want := g.Free(k), ranks-busy; got != want {
						t.Fatalf("Free(%d): got %d, want %d", k, got, want)
					}
				}
				r := genRequest(t)
				for k, gate := range gates {
					if got, want := g.GatedFor(k, r), naiveGated(reg, gate, r); got != want {
						t.Fatalf("GatedFor(%d, pin %+v route %+v): got %v, want %v", k, r.Pin, r.Route, got, want)
					}
				}
			},
		})
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
