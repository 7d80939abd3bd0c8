package loadgen

import (
	"slices"
	"testing"
)

// TestPrefixWorkload: prompts share exactly their prefix's blocks (the
// chained hashes agree up to the prefix's length and differ after), prefix
// lengths are within the range, the most popular prefix is drawn most, and
// one seed gives one workload.
func TestPrefixWorkload(t *testing.T) {
	p := Prefixes{N: 50, Zipf: 1.1, MinBlocks: 2, MaxBlocks: 64, SuffixBlocks: 4}
	if err := p.withDefaults(); err != nil {
		t.Fatal(err)
	}
	g, g2 := newPrefixGen(p, 42), newPrefixGen(p, 42)
	first := map[int][]uint64{}
	count := make([]int, p.N)
	for n := range 2000 {
		hs, k := g.next(n)
		hs2, _ := g2.next(n)
		if !slices.Equal(hs, hs2) {
			t.Fatalf("request %d: two generators with one seed differ", n)
		}
		count[k]++
		l := g.lengths[k]
		if l < 2 || l > 64 || len(hs) != l+4 {
			t.Fatalf("request %d: prefix %d of %d blocks, %d hashes; want 2 to 64 blocks and 4 more hashes", n, k, l, len(hs))
		}
		if f, ok := first[k]; ok {
			if !slices.Equal(f[:l], hs[:l]) {
				t.Fatalf("request %d: prefix %d's hashes differ from its first request's", n, k)
			}
			if f[l] == hs[l] {
				t.Fatalf("request %d: its own first block hashes like another request's", n)
			}
		} else {
			first[k] = hs
		}
	}
	if slices.Max(count) != count[0] || count[0] < 5*count[p.N-1] {
		t.Fatalf("draws per prefix %v: want prefix 0 the most, well above the last", count)
	}
	if _, _, err := ParseBlockRange("64:2"); err == nil {
		t.Fatal("ParseBlockRange(64:2) succeeded")
	}
	if lo, hi, err := ParseBlockRange("2:64"); err != nil || lo != 2 || hi != 64 {
		t.Fatalf("ParseBlockRange(2:64) = %d, %d, %v", lo, hi, err)
	}
}
