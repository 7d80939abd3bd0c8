package mockworker

import (
	"math/rand/v2"
	"slices"
	"testing"

	"fairdispatch/wire"
)

// opLog records a prefix cache's changes as a set per tier, applying them in
// order, as the dispatcher's index would.
type opLog struct {
	held [wire.NumTiers]map[uint64]bool
}

func (o *opLog) CacheStored(_ int, t wire.Tier, hs []uint64) error {
	for _, h := range hs {
		o.held[t][h] = true
	}
	return nil
}

func (o *opLog) CacheRemoved(_ int, t wire.Tier, hs []uint64) error {
	for _, h := range hs {
		delete(o.held[t], h)
	}
	return nil
}

// TestPrefixCacheLRU: a device tier of 3 blocks and a host tier of 2: the
// least recently used device block moves to the host, the host's oldest is
// dropped, a host hit counts as cached and moves back to the device.
func TestPrefixCacheLRU(t *testing.T) {
	c := newPrefixCache(3, 2)
	o := &opLog{}
	for i := range o.held {
		o.held[i] = map[uint64]bool{}
	}
	c.use(0, []uint64{1, 2, 3}, o)
	c.use(0, []uint64{4, 5}, o) // 1, 2 to the host
	if got := c.held(); !slices.Equal(got[wire.Device], []uint64{5, 4, 3}) || !slices.Equal(got[wire.Host], []uint64{2, 1}) {
		t.Fatalf("held %v, want device [5 4 3], host [2 1]", got)
	}
	if n := c.cached([]uint64{1, 2, 3, 9}); n != 3 {
		t.Fatalf("cached %d, want 3 (two on the host, one on the device)", n)
	}
	c.use(0, []uint64{1}, o) // 1 back to the device, 3 to the host
	if got := c.held(); !slices.Equal(got[wire.Device], []uint64{1, 5, 4}) || !slices.Equal(got[wire.Host], []uint64{3, 2}) {
		t.Fatalf("held %v, want device [1 5 4], host [3 2]", got)
	}
	c.use(0, []uint64{6}, o) // 4 to the host, 2 dropped
	if n := c.cached([]uint64{2, 1}); n != 0 {
		t.Fatalf("cached %d, want 0 (block 2 dropped)", n)
	}
}

// TestPrefixCacheOpsMatch: over random prompts, the changes told to the
// helper, applied in order, leave exactly what the cache holds.
func TestPrefixCacheOpsMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, caps := range [][2]int{{5, 0}, {8, 3}, {2, 10}} {
		c := newPrefixCache(caps[0], caps[1])
		o := &opLog{}
		for i := range o.held {
			o.held[i] = map[uint64]bool{}
		}
		for range 500 {
			p := make([]uint64, 1+rng.IntN(12))
			for i := range p {
				p[i] = uint64(rng.IntN(30))
			}
			c.use(0, p, o)
			got := c.held()
			for tier := range wire.NumTiers {
				want := slices.Sorted(func(yield func(uint64) bool) {
					for h := range o.held[tier] {
						if !yield(h) {
							return
						}
					}
				})
				have := slices.Sorted(slices.Values(got[tier]))
				if !slices.Equal(have, want) {
					t.Fatalf("caps %v tier %v: cache holds %v, the changes say %v", caps, tier, have, want)
				}
			}
			if len(got[wire.Device]) > caps[0] || len(got[wire.Host]) > caps[1] {
				t.Fatalf("caps %v: over capacity: %v", caps, got)
			}
		}
	}
}
