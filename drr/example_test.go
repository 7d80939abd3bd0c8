package drr_test

import (
	"fmt"

	"fairdispatch/drr"
)

// fifo is a class whose requests are all dispatchable, served in arrival order.
type fifo struct{ costs []uint64 }

func (f *fifo) Empty() bool               { return len(f.costs) == 0 }
func (f *fifo) Candidate() (uint64, bool) { return f.costs[0], true }
func (f *fifo) Pop()                      { f.costs = f.costs[1:] }

// The seed's premium/regular set-up: every request costs 512 uncached tokens,
// premium earns 512 credit per round and regular 128, so while both are backlogged
// premium is served four times as often.
func ExampleArbiter() {
	premium := &fifo{costs: []uint64{512, 512, 512, 512, 512, 512, 512, 512}}
	regular := &fifo{costs: []uint64{512, 512, 512}}
	names := []string{"premium", "regular"}
	qs := []drr.Queue{premium, regular}

	a := drr.New([]uint64{512, 128})
	for {
		k, ok := a.Next(qs)
		if !ok {
			break
		}
		fmt.Printf("%-7s deficits %4d %4d\n", names[k], a.Deficit(0), a.Deficit(1))
	}
	// Output:
	// premium deficits    0    0
	// premium deficits    0  128
	// premium deficits    0  256
	// premium deficits    0  384
	// regular deficits    0    0
	// premium deficits    0    0
	// premium deficits    0  128
	// premium deficits    0  256
	// premium deficits    0  384
	// regular deficits    0    0
	// regular deficits    0    0
}
