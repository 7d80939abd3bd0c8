package filters_test

import (
	"fmt"
	"math/rand/v2"

	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// Two workers, one class gated at 4096 prefill tokens, and a selector with an
// overload threshold of 8192 tokens. A dispatch is booked on the chosen rank
// and the gate counts follow; once every rank is over the gate threshold the
// class is gated, and once every worker is overloaded selection fails.
func Example() {
	reg := workers.New()
	for id, prefill := range map[string]int{"w1": 3900, "w2": 4000} {
		r, _ := workers.ParseReport(id, fmt.Appendf(nil,
			`{"worker_id": %q, "max_num_batched_tokens": 8192, "seen_seq": 0,
			  "ranks": [{"dp_rank": 0, "active_prefill_tokens": %d}]}`, id, prefill))
		reg.Apply(0, r)
	}
	gateAt, overloadAt := uint64(4096), uint64(8192)
	gates := filters.NewGates(reg, []filters.Gate{{Threshold: &gateAt}})
	for _, w := range reg.All() {
		gates.Update(w)
	}
	sel := filters.NewSelector(filters.DefaultScoring(),
		filters.Thresholds{PrefillTokens: &overloadAt}, rand.New(rand.NewPCG(1, 2)))

	req := &request.Snapshot{ISL: 3000, Cost: 3000}
	for range 5 {
		fmt.Printf("gated=%-5v free=%d ", gates.Gated(0), gates.Free(0))
		ch, code := sel.Select(reg, req)
		if code != "" {
			fmt.Println("rejected:", code)
			break
		}
		reg.Book(0, ch.Worker, ch.Rank, req.Cost)
		gates.Update(ch.Worker)
		fmt.Printf("-> %s, now %d tokens\n", ch.Worker.ID, ch.Worker.Rank(ch.Rank).Load().ActivePrefillTokens)
	}
	// Output:
	// gated=false free=2 -> w1, now 6900 tokens
	// gated=false free=1 -> w2, now 7000 tokens
	// gated=true  free=0 -> w1, now 9900 tokens
	// gated=true  free=0 -> w2, now 10000 tokens
	// gated=true  free=0 rejected: all_workers_overloaded
}
