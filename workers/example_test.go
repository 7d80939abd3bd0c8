package workers_test

import (
	"fmt"

	"fairdispatch/workers"
)

// A worker reports, the dispatcher books three dispatches to it, and the next
// report counts two of them (seen_seq 2): the dispatcher's view is that report
// plus the one dispatch it does not count yet. Then the worker goes silent and
// is fenced once its TTL has passed.
func Example() {
	const ms = int64(1e6)
	reg := workers.New()

	r, err := workers.ParseReport("w1", []byte(`{"worker_id": "w1", "ttl_ms": 1000,
		"instance": "8f3c2a", "seen_seq": 0,
		"ranks": [{"dp_rank": 0, "active_prefill_tokens": 100}]}`))
	if err != nil {
		panic(err)
	}
	w, ch, _ := reg.Apply(0, r)
	fmt.Println("new:", ch.New, "prefill:", w.Rank(0).Load().ActivePrefillTokens)

	for _, cost := range []uint64{10, 20, 30} {
		seq := reg.Book(1*ms, w, 0, cost)
		fmt.Println("dispatch seq", seq, "prefill:", w.Rank(0).Load().ActivePrefillTokens)
	}

	r, _ = workers.ParseReport("w1", []byte(`{"worker_id": "w1", "ttl_ms": 1000,
		"instance": "8f3c2a", "seen_seq": 2,
		"ranks": [{"dp_rank": 0, "active_prefill_tokens": 130}]}`))
	_, ch, _ = reg.Apply(500*ms, r)
	fmt.Println("counted:", ch.Dropped, "still booked:", w.Bookings(),
		"prefill:", w.Rank(0).Load().ActivePrefillTokens)

	_, err = workers.ParseReport("w1", []byte(`{"worker_id": "w2"}`))
	fmt.Println("dropped:", workers.Reason(err))

	fmt.Println("expired at 1500ms:", len(reg.Expire(1500*ms, nil)))
	fmt.Println("expired at 1500ms+1ns:", len(reg.Expire(1500*ms+1, nil)), "live:", reg.Len())
	// Output:
	// new: true prefill: 100
	// dispatch seq 1 prefill: 110
	// dispatch seq 2 prefill: 130
	// dispatch seq 3 prefill: 160
	// counted: 2 still booked: 1 prefill: 160
	// dropped: mismatch
	// expired at 1500ms: 0
	// expired at 1500ms+1ns: 1 live: 0
}
