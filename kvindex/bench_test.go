package kvindex_test

import (
	"fmt"
	"testing"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
)

// mix is splitmix64's finaliser: distinct, well spread block hashes.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// BenchmarkApply is the acceptance benchmark of event application: 256 ranks
// (64 workers of 4 ranks), each an LRU cache of `held` blocks in steady
// state; groups of 4 ranks cache the same blocks, so each block has 4
// holders. One op is one event of one rank storing `batch` new device blocks
// and removing its `batch` oldest; blockops/s counts stored plus removed
// hashes applied per second.
func BenchmarkApply(b *testing.B) {
	for _, batch := range []int{1, 16, 128} {
		for _, held := range []int{1024} {
			b.Run(fmt.Sprintf("batch=%d/held=%d", batch, held), func(b *testing.B) { benchApply(b, batch, held) })
		}
	}
}

func benchApply(b *testing.B, batch, held int) {
	const workers, ranks = 64, 4
	x := newIndex(b, 1<<24)
	next := make([]uint64, workers*ranks) // next block counter of each rank
	ids := make([]uint64, workers*ranks)
	names := make([]string, workers)
	for w := range names {
		names[w] = fmt.Sprintf("worker-%d", w)
	}
	stored := make([]uint64, batch)
	removed := make([]uint64, batch)
	var ev wire.KVEvent
	ev.Instance = "boot"
	step := func(s int) {
		w, r := s/ranks, s%ranks
		group := uint64(s / 4)
		for i := range batch {
			stored[i] = mix(group<<32 | next[s] + uint64(i))
			if old := int64(next[s]) + int64(i) - int64(held); old >= 0 {
				removed[i] = mix(group<<32 | uint64(old))
			} else {
				removed[i] = 0 // unknown: a no-op
			}
		}
		next[s] += uint64(batch)
		ids[s]++
		ev.ID, ev.Rank = ids[s], int32(r)
		ev.Stored[wire.Device] = stored
		ev.Removed[wire.Device] = removed
		if _, err := x.Apply(names[w], &ev); err != nil {
			b.Fatal(err)
		}
	}
	for range held / batch {
		for s := range next {
			step(s)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		step(i % len(next))
	}
	b.StopTimer()
	if st := x.Stats(); st.Stale != 0 || st.Blocks != len(next)*held {
		b.Fatalf("stats %+v, want %d blocks, none stale", st, len(next)*held)
	}
	b.ReportMetric(float64(2*batch*b.N)/b.Elapsed().Seconds(), "blockops/s")
}

// BenchmarkOverlap is the acceptance benchmark of the overlap query: a
// 512-block prompt over 256 ranks (64 workers of 4), each rank holding `own`
// blocks of its own (own=4096: an index of a million pairs, far beyond the
// processor's caches), and `holders` of the ranks holding the prompt (rank k
// of them the first 512*(k+1)/holders blocks, so prefixes end at various
// places; with holders=256 every rank holds a prefix of it, the worst case).
func BenchmarkOverlap(b *testing.B) {
	for _, own := range []int{0, 4096} {
		for _, holders := range []int{1, 16, 64, 256} {
			name := fmt.Sprintf("blocks=512/ranks=256/own=%d/holders=%d", own, holders)
			b.Run(name, func(b *testing.B) { benchOverlap(b, 512, 256, own, holders, false) })
		}
	}
}

// BenchmarkOverlapWhole is BenchmarkOverlap with each of the `holders` ranks
// holding the whole prompt (in the tier of its rank number modulo 4): with
// holders=256 no prefix ends before the prompt does, the worst case of the
// acceptance goal (docs/bench.md, KV cache index).
func BenchmarkOverlapWhole(b *testing.B) {
	for _, own := range []int{0, 4096} {
		for _, holders := range []int{1, 16, 64, 256} {
			name := fmt.Sprintf("blocks=512/ranks=256/own=%d/holders=%d", own, holders)
			b.Run(name, func(b *testing.B) { benchOverlap(b, 512, 256, own, holders, true) })
		}
	}
}

func benchOverlap(b *testing.B, blocks, ranks, ownBlocks, holders int, whole bool) {
	x := newIndex(b, 1<<24)
	prompt := make([]uint64, blocks)
	for i := range prompt {
		prompt[i] = mix(1<<62 | uint64(i))
	}
	own := make([]uint64, ownBlocks)
	for s := range ranks {
		w, r := fmt.Sprintf("worker-%d", s/4), int32(s%4)
		for i := range own {
			own[i] = mix(uint64(s+1)<<32 | uint64(i))
		}
		var id uint64 = 1
		for i := 0; i < len(own); i += wire.MaxHashes / 2 {
			e := ev(id, r, wire.Device, own[i:min(len(own), i+wire.MaxHashes/2)]...)
			id++
			if _, err := x.Apply(w, e); err != nil {
				b.Fatal(err)
			}
		}
		if s < holders {
			n := blocks * (s + 1) / holders
			if whole {
				n = blocks
			}
			e := ev(id, r, wire.Tier(s%int(wire.NumTiers)), prompt[:n]...)
			if _, err := x.Apply(w, e); err != nil {
				b.Fatal(err)
			}
		}
	}
	var o kvindex.Overlaps
	x.Overlap(prompt, &o)
	if len(o.Hits) != holders {
		b.Fatalf("got %d hits, want %d", len(o.Hits), holders)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		x.Overlap(prompt, &o)
	}
}
