package scheduler

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"fairdispatch/request"
)

// settleLoad feeds a settlement memory bounded at 1,000,000 dispatches, one
// dispatch a step, round robin over its workers.
type settleLoad struct {
	st   settlements
	ws   []string
	seq  []uint64
	snap *request.Snapshot
	now  int64
}

func newSettleLoad(workers int) *settleLoad {
	l := &settleLoad{ws: make([]string, workers), seq: make([]uint64, workers),
		snap: &request.Snapshot{ID: "req-0000000001", Key: "tenant"}}
	l.st.init(Config{MaxUnsettled: 1_000_000}, func(int, string) {})
	for i := range l.ws {
		l.ws[i] = "worker-" + strconv.Itoa(i)
	}
	return l
}

// step records dispatch i and expires what is beyond the bound; with settle,
// it also finds the dispatch its worker got 8 before and settles it.
func (l *settleLoad) step(i int, settle bool) {
	w := i % len(l.ws)
	l.seq[w]++
	l.now++
	l.st.record(l.now, Decision{Worker: l.ws[w], Seq: l.seq[w], Req: l.snap}, 512, false)
	if settle && l.seq[w] > 8 {
		if r := l.st.find(l.ws[w], l.seq[w]-8); r != nil {
			r.settled = true
		}
	}
	l.st.expire(l.now)
}

// BenchmarkSettlementsSteady is the settlement memory at its bound: 64
// workers, 1,000,000 dispatches remembered, each new dispatch forgetting the
// oldest (as at 40,000 dispatches a second for 25 s and more), and one
// completion record looked up per dispatch.
func BenchmarkSettlementsSteady(b *testing.B) {
	l := newSettleLoad(64)
	for i := range 1_000_000 {
		l.step(i, true)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		l.step(i, true)
	}
}

// BenchmarkSettlementsWorstStep: the longest single dispatch (record and
// expire) at 1,000,000 kept, as the queue actor would feel it, for one, 8
// and 64 workers, and how many dispatches a million took over 500 µs. A log
// that moved its live part back to the front at times (a slice with a moving
// head) paused here for as long as a copy of the worker's whole log, every
// time its head passed the middle; the ring moves nothing in the steady
// state, so what is left is the machine's (a thread descheduled, an
// interrupt): single steps at random places.
func BenchmarkSettlementsWorstStep(b *testing.B) {
	for _, nw := range []int{1, 8, 64} {
		b.Run("workers="+strconv.Itoa(nw), func(b *testing.B) {
			l := newSettleLoad(nw)
			for i := range 2_000_000 { // past the first wrap of every log
				l.step(i, false)
			}
			runtime.GC() // not the warm-up's garbage collection in the worst step
			var worst time.Duration
			slow := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				l.step(i, false)
				d := time.Since(t0)
				worst = max(worst, d)
				if d > 500*time.Microsecond {
					slow++
				}
			}
			b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
			b.ReportMetric(float64(slow)*1e6/float64(b.N), "over-500µs/M")
		})
	}
}
