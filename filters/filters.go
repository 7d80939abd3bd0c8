package filters

import (
	"math"

	"fairdispatch/request"
	"fairdispatch/workers"
)

// UnknownBatched stands for max_num_batched_tokens when a worker does not report it.
const UnknownBatched = 10_000_000

// Thresholds are the busy thresholds of docs/design.md, Worker selection, set by flags and changed at
// run time. A nil field is unset.
type Thresholds struct {
	// DecodeBlocks is active_decode_blocks_threshold, a fraction of total_kv_blocks.
	DecodeBlocks *float64
	// PrefillTokens is active_prefill_tokens_threshold, in tokens.
	PrefillTokens *uint64
	// PrefillFrac is active_prefill_tokens_threshold_frac, a fraction of max_num_batched_tokens.
	PrefillFrac *float64
}

// UpdateLatch sets or clears the decode latch of every rank of w from its last
// report: set when kv_used_blocks or active_decode_blocks exceeds
// DecodeBlocks * total_kv_blocks, cleared when both are at or below it. A worker
// reporting total_kv_blocks 0, or an unset threshold, has no latch.
func (t Thresholds) UpdateLatch(w *workers.Worker) {
	for i := range w.Ranks {
		rk := &w.Ranks[i]
		if t.DecodeBlocks == nil || w.TotalKV == 0 {
			rk.Latch = false
			continue
		}
		lim := *t.DecodeBlocks * float64(w.TotalKV)
		rk.Latch = float64(rk.Reported.KVUsedBlocks) > lim || float64(rk.Reported.ActiveDecodeBlocks) > lim
	}
}

// RankOverloaded reports whether rank rk of w is overloaded (docs/design.md,
// Worker selection): its decode latch is set, its prefill load is above a
// threshold, or it is at its capacity (max_active_requests, counting bookings).
func (t Thresholds) RankOverloaded(w *workers.Worker, rk *workers.Rank) bool {
	if rk.Latch || w.Full(rk) {
		return true
	}
	if t.PrefillTokens == nil && t.PrefillFrac == nil {
		return false
	}
	p := rk.Load().ActivePrefillTokens
	if t.PrefillTokens != nil && p > *t.PrefillTokens {
		return true
	}
	if t.PrefillFrac != nil && float64(p) > math.Floor(*t.PrefillFrac*float64(batched(w))) {
		return true
	}
	return false
}

// Overloaded reports whether worker w is overloaded: draining, excluded after a
// refusal, or every rank overloaded. None of an overloaded worker's ranks is a
// candidate for selection.
func (t Thresholds) Overloaded(w *workers.Worker) bool {
	if w.Draining || w.Excluded {
		return true
	}
	for i := range w.Ranks {
		if !t.RankOverloaded(w, &w.Ranks[i]) {
			return false
		}
	}
	return true
}

// Eligible reports whether live worker w passes r's allow-list and carries every
// taint r requires (docs/design.md, Gates). Rank bounds are checked by the caller.
func Eligible(w *workers.Worker, r *request.Snapshot) bool {
	if r.Route == nil {
		return true
	}
	if !r.Allowed(w.ID) {
		return false
	}
	for _, t := range r.Route.Required {
		if !w.HasTaint(t) {
			return false
		}
	}
	return true
}

func batched(w *workers.Worker) uint64 {
	if w.MaxBatched == 0 {
		return UnknownBatched
	}
	return w.MaxBatched
}
