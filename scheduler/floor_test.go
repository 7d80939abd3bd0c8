package scheduler

import (
	"fmt"
	"math"
	"testing"

	"fairdispatch/request"
)

// floorClass is one class whose tier 0 has the floor share (none when
// share is 0).
func floorClass(share float64) string {
	extra := ""
	if share > 0 {
		extra = fmt.Sprintf(", min_share: {0: %g}", share)
	}
	return `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 0` + extra + `}
`
}

// TestTierFloor is acceptance 4 (docs/design.md, Tier floors): under a
// saturating tier 1, a backlogged tier 0 with min_share 0.1 gets 10% +- 2%
// of the class's service (by cost, requests of mixed sizes); without the
// floor, the negative control, it gets nothing.
func TestTierFloor(t *testing.T) {
	for _, tc := range []struct {
		share, lo, hi float64
	}{{0.1, 0.08, 0.12}, {0.3, 0.28, 0.32}, {0, 0, 0}} {
		t.Run(fmt.Sprint(tc.share), func(t *testing.T) {
			f := newFleet(t, floorClass(tc.share), 2, 2500)
			served := map[uint32]float64{}
			queued := map[uint32]int{}
			n := 0
			f.topUp = func(now int64) {
				for tier := range uint32(2) {
					for ; queued[tier] < 30; queued[tier]++ {
						n++
						cost := uint64(50 + 100*(n%5))
						f.add(now, request.Arrival{ID: fmt.Sprint(n), Token: "c", ISL: cost, Strict: tier}, 0)
					}
				}
			}
			f.onDispatch = func(j *vjob) {
				queued[j.d.Req.Strict]--
				if j.start-vstart > 1e9 {
					served[j.d.Req.Strict] += float64(j.d.Req.Cost)
				}
			}
			f.run(60e9)
			got := served[0] / (served[0] + served[1])
			t.Logf("min_share %g: tier 0 got %.4f of the service", tc.share, got)
			if got < tc.lo-1e-9 || got > tc.hi+1e-9 || math.IsNaN(got) {
				t.Errorf("tier 0 got %.4f, want [%g, %g]", got, tc.lo, tc.hi)
			}
		})
	}
}
