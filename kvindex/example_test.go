package kvindex_test

import (
	"fmt"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
)

// A worker rank reports the blocks of a prompt it cached; a later request
// sharing the first two blocks overlaps it by two.
func Example() {
	x, _ := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 20})
	prompt := wire.ChainHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4)
	ev := &wire.KVEvent{Instance: "boot-1", ID: 1, Rank: 0}
	ev.Stored[wire.Device] = prompt[:1]
	ev.Stored[wire.Host] = prompt[1:]
	x.Apply("gpu-1", ev)

	request := wire.ChainHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0}, 4)
	var o kvindex.Overlaps
	x.Overlap(request, &o)
	best, _ := o.Best()
	fmt.Printf("%s rank %d: %d blocks, weighted %.2f\n", best.Worker, best.Rank, best.Blocks, best.Weighted)
	// Output: gpu-1 rank 0: 2 blocks, weighted 1.75
}
