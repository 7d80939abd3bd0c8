package scheduler

import (
	"strconv"
	"testing"

	"fairdispatch/request"
)

// BenchmarkSettlementsSteady is the settlement memory at its bound: 64
// workers, 1,000,000 dispatches remembered, each new dispatch forgetting the
// oldest (as at 40,000 dispatches a second for 25 s and more), and one
// completion record looked up per dispatch.
func BenchmarkSettlementsSteady(b *testing.B) {
	var st settlements
	st.init(Config{MaxUnsettled: 1_000_000}, func(int, string) {})
	ws := make([]string, 64)
	for i := range ws {
		ws[i] = "worker-" + strconv.Itoa(i)
	}
	seq := make([]uint64, len(ws))
	snap := &request.Snapshot{ID: "req-0000000001", Key: "tenant"}
	var now int64
	step := func(i int) {
		w := i % len(ws)
		seq[w]++
		now++
		st.record(now, Decision{Worker: ws[w], Seq: seq[w], Req: snap}, 512, false)
		if seq[w] > 8 {
			if r := st.find(ws[w], seq[w]-8); r != nil {
				r.settled = true
			}
		}
		st.expire(now)
	}
	for i := range 1_000_000 {
		step(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		step(i)
	}
}
