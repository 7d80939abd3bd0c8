package lanes_test

import (
	"fmt"

	"fairdispatch/lanes"
	"fairdispatch/request"
)

// busy is a Checker: a pinned request is dispatchable unless its worker is busy;
// unpinned requests always are.
type busy map[string]bool

func (b busy) Dispatchable(r *request.Snapshot) bool { return !b[r.Pin.Worker] }

// An FCFS class (score = jump - arrival seconds) with one shared request and two
// lanes pinned to worker w1. While w1 is busy its lane is set aside and the rest
// of the class keeps flowing; a recheck of w1 (its load report) brings it back.
func Example() {
	workers := busy{}
	c := lanes.NewKeyed(workers, lanes.KeyConfig{}) // every request of the default key
	mk := func(id string, seq uint64, arrival, jump float64, pin request.Target) *request.Snapshot {
		return &request.Snapshot{ID: id, Seq: seq, Score: jump - arrival, Pin: pin,
			ISL: 100, Cost: 100, Index: -1, DeadlineIndex: -1}
	}
	w1 := request.Target{Worker: "w1", Rank: request.AnyRank}
	c.Push(mk("pinned-a", 1, 10, 0, w1))
	c.Push(mk("shared-b", 2, 11, 0, request.Target{}))
	c.Push(mk("pinned-c", 3, 12, 0, w1))
	c.Push(mk("shared-jump", 4, 13, 5, request.Target{})) // ranks as if published at 8

	next := func() {
		if _, ok := c.Candidate(); !ok {
			pinned, blocked := c.Lanes()
			fmt.Printf("nothing dispatchable (%d queued, %d/%d lanes blocked)\n", c.Len(), blocked, pinned)
			return
		}
		c.Pop()
		fmt.Println(c.Last().ID)
	}

	next() // the jump puts it first
	workers["w1"] = true
	next() // the w1 lane is set aside; the shared lane is not held up
	next()
	workers["w1"] = false
	c.Recheck("w1")
	next()
	next()
	// Output:
	// shared-jump
	// shared-b
	// nothing dispatchable (2 queued, 1/1 lanes blocked)
	// pinned-a
	// pinned-c
}
