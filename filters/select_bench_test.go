package filters_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// benchFleet returns a registry of ranks/4 workers of 4 ranks each, with
// spread prefill and decode loads.
func benchFleet(b *testing.B, ranks int) *workers.Registry {
	rng := rand.New(rand.NewPCG(1, 2))
	var specs []spec
	for i := range ranks / 4 {
		s := spec{id: fmt.Sprintf("w%05d", i), prefill: make([]uint64, 4), decode: make([]uint64, 4)}
		for j := range 4 {
			s.prefill[j] = uint64(rng.IntN(64)) * 16
			s.decode[j] = uint64(rng.IntN(8))
		}
		specs = append(specs, s)
	}
	return registry(b, specs...)
}

// BenchmarkSelect measures one dispatch's selection and booking, plus the
// release of an earlier booking so that loads keep moving, at 16, 256 and
// 4096 ranks: unconstrained requests (plain: by the index; scan: the same by
// the scan over every rank), and requests with an overlap header (which score
// every rank).
func BenchmarkSelect(b *testing.B) {
	for _, kind := range []string{"plain", "scan", "overlap"} {
		for _, ranks := range []int{16, 256, 4096} {
			b.Run(fmt.Sprintf("%s/ranks=%d", kind, ranks), func(b *testing.B) {
				reg := benchFleet(b, ranks)
				s := filters.NewSelector(filters.DefaultScoring(), filters.Thresholds{}, rand.New(rand.NewPCG(3, 4)))
				s.Scan = kind == "scan" // the same requests as plain, by the scan over every rank
				r := &request.Snapshot{ISL: 512, Cost: 512}
				if kind == "overlap" {
					r.Route = &request.Route{Overlap: []request.Overlap{{Worker: "w00001", Tokens: 256}}}
				}
				type held struct {
					w   *workers.Worker
					seq uint64
				}
				ring := make([]held, ranks)
				step := func(i int) {
					ch, code := s.Select(reg, r)
					if code != "" {
						b.Fatalf("Select: %s", code)
					}
					h := &ring[i%len(ring)]
					if h.w != nil {
						reg.Unbook(h.w, h.seq)
					}
					h.w, h.seq = ch.Worker, reg.Book(0, ch.Worker, ch.Rank, r.Cost)
				}
				for i := range 4 * ranks { // warm: the index built, every slot booked once
					step(i)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					step(4*ranks + i)
				}
			})
		}
	}
}
