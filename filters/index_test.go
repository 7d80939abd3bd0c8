package filters

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/request"
	"fairdispatch/workers"
)

// TestIndexMatchesScan is the property that makes the rank index safe: on
// random fleets under random reports, bookings, releases, refusals, expiry
// and changes of thresholds and scoring, the index picks exactly what the scan
// over every rank would: the same code, the same cost, a rank among the scan's
// lowest-cost ranks, and the same random draws (both selectors' sources stay
// in step, so the index draws once among the same number of tied ranks).
func TestIndexMatchesScan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reg := workers.New()
		seed := rapid.Uint64().Draw(t, "seed")
		srcScan, srcIdx := rand.NewPCG(seed, 1), rand.NewPCG(seed, 1)
		scan := NewSelector(DefaultScoring(), Thresholds{}, rand.New(srcScan))
		scan.Scan = true
		idx := NewSelector(DefaultScoring(), Thresholds{}, rand.New(srcIdx))
		idx.scanBelow = 0 // the index even for one worker
		now := int64(0)
		nWorkers := rapid.IntRange(1, 12).Draw(t, "workers")
		ids := make([]string, nWorkers)
		for i := range ids {
			ids[i] = fmt.Sprintf("w%02d", i)
		}
		var seqs []struct {
			id  string
			seq uint64
		}
		// Small loads make ties common, which is where the two could part.
		load := func(t *rapid.T, name string) uint64 {
			return uint64(rapid.IntRange(0, 4).Draw(t, name)) * 16
		}
		report := func(t *rapid.T) {
			id := rapid.SampledFrom(ids).Draw(t, "id")
			n := rapid.IntRange(1, 4).Draw(t, "ranks")
			r := workers.Report{WorkerID: id, Instance: "i", DPStart: uint32(rapid.IntRange(0, 1).Draw(t, "start")),
				DPSize: uint32(n), TTLms: 1000, HasSeenSeq: true,
				Draining:   rapid.IntRange(0, 9).Draw(t, "draining") == 0,
				MaxActive:  uint64(rapid.IntRange(0, 3).Draw(t, "capacity")),
				TotalKV:    uint64(rapid.IntRange(0, 1).Draw(t, "kv")) * 100,
				MaxBatched: uint64(rapid.IntRange(0, 1).Draw(t, "batched")) * 64}
			if w := reg.Get(id); w != nil && rapid.Bool().Draw(t, "counts bookings") {
				r.SeenSeq = uint64(rapid.IntRange(0, 40).Draw(t, "seen"))
				r.DPStart, r.DPSize = w.Start, uint32(len(w.Ranks))
				n = len(w.Ranks)
			}
			for i := range n {
				r.Ranks = append(r.Ranks, workers.RankLoad{Rank: r.DPStart + uint32(i),
					ActivePrefillTokens: load(t, "prefill"), ActiveDecodeBlocks: load(t, "decode") / 16,
					KVUsedBlocks: load(t, "kv used"), ActiveRequests: uint64(rapid.IntRange(0, 3).Draw(t, "reqs"))})
			}
			if w, _, ok := reg.Apply(now, r); ok {
				scan.Thresholds.UpdateLatch(w)
			}
		}
		for range nWorkers {
			report(t)
		}
		t.Repeat(map[string]func(*rapid.T){
			"report": report,
			"select": func(t *rapid.T) {
				r := &request.Snapshot{ISL: uint64(rapid.IntRange(0, 100).Draw(t, "isl"))}
				r.Cost = max(1, r.ISL)
				if rapid.Bool().Draw(t, "empty route") {
					r.Route = &request.Route{}
				}
				want, wcode := scan.Select(reg, r)
				// The scan's candidates stay in its scratch: find its least cost.
				lo, tied := 0.0, map[Choice]bool{}
				for i, c := range scan.cands {
					if i == 0 || c.cost < lo {
						lo, tied = c.cost, map[Choice]bool{}
					}
					if c.cost == lo {
						tied[Choice{c.w, c.rank}] = true
					}
				}
				got, gcode := idx.Select(reg, r)
				if gcode != wcode {
					t.Fatalf("code: got %q, want %q (scan)", gcode, wcode)
				}
				if wcode != "" {
					return
				}
				if !tied[got] {
					t.Fatalf("index chose %s rank %d, not among the scan's least-cost ranks (scan chose %s rank %d at %v)",
						got.Worker.ID, got.Rank, want.Worker.ID, want.Rank, lo)
				}
				if a, b := srcScan.Uint64(), srcIdx.Uint64(); a != b {
					t.Fatalf("random sources out of step after a selection among %d tied ranks", len(tied))
				}
				if rapid.Bool().Draw(t, "book") {
					seqs = append(seqs, struct {
						id  string
						seq uint64
					}{want.Worker.ID, reg.Book(now, want.Worker, want.Rank, r.Cost)})
				}
			},
			"unbook": func(t *rapid.T) {
				if len(seqs) == 0 {
					t.Skip("nothing booked")
				}
				b := rapid.SampledFrom(seqs).Draw(t, "booking")
				if w := reg.Get(b.id); w != nil {
					if rapid.Bool().Draw(t, "refused") {
						reg.Refused(now, w, b.seq)
					}
					reg.Unbook(w, b.seq)
				}
			},
			"accepted": func(t *rapid.T) {
				if w := reg.Get(rapid.SampledFrom(ids).Draw(t, "id")); w != nil {
					reg.Accepted(w)
				}
			},
			"tick": func(t *rapid.T) {
				now += int64(rapid.IntRange(1, 800).Draw(t, "ms")) * 1e6
				reg.Expire(now, nil)
			},
			"thresholds": func(t *rapid.T) {
				var th Thresholds
				if rapid.Bool().Draw(t, "prefill") {
					v := uint64(rapid.IntRange(0, 64).Draw(t, "prefill tokens"))
					th.PrefillTokens = &v
				}
				if rapid.Bool().Draw(t, "frac") {
					v := rapid.Float64Range(0, 1).Draw(t, "frac")
					th.PrefillFrac = &v
				}
				if rapid.Bool().Draw(t, "decode") {
					v := rapid.Float64Range(0, 1).Draw(t, "decode blocks")
					th.DecodeBlocks = &v
				}
				scan.Thresholds, idx.Thresholds = th, th
				for _, w := range reg.All() {
					th.UpdateLatch(w)
				}
			},
			"scoring": func(t *rapid.T) {
				sc := DefaultScoring()
				sc.BlockSize = rapid.SampledFrom([]float64{16, 7, 64}).Draw(t, "block size")
				sc.PrefillScale = rapid.SampledFrom([]float64{1, 0.3, 1.7, 0}).Draw(t, "prefill scale")
				sc.DecodeRequestWeight = rapid.SampledFrom([]float64{0, 0.5, 3}).Draw(t, "request weight")
				scan.Scoring, idx.Scoring = sc, sc
			},
		})
	})
}
