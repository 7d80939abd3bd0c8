package scheduler

import "fairdispatch/request"

// booking returns the prefill tokens dispatch d of r books on its chosen
// rank (docs/protocol.md, Bookings and seen_seq): r's uncached tokens on
// that rank. With the KV cache index, the rank's overlap at dispatch (the
// longest prefix of r's blocks it holds, in any tier, in whole blocks);
// with Dispatch-Worker-Overlap, the chosen worker's overlap; otherwise
// r's cost at arrival. At least 1, like the cost. O(overlaps).
func (s *Scheduler) booking(r *request.Snapshot, d Decision) uint64 {
	var cached uint64
	switch {
	case d.KVPrompt > 0:
		cached = uint64(d.KVOverlap) * uint64(s.sel.Scoring.BlockSize)
	case r.Route != nil && r.Route.Overlap != nil:
		for _, o := range r.Route.Overlap {
			if o.Worker == d.Worker {
				cached = o.Tokens
				break
			}
		}
	default:
		return r.Cost
	}
	return max(1, r.ISL-min(r.ISL, cached))
}
