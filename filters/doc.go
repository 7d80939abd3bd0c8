// Package filters decides, for a request and the live workers of a
// [workers.Registry], which ranks it may go to, whether its class must wait,
// whether a worker is too loaded to take it, and which rank it goes to
// (docs/design.md, Gates and Worker selection). It is part of the deterministic core: no goroutines, locks,
// I/O or clock; randomness comes from an injected *rand.Rand.
//
// Throughout, a rank's load is the registry's view of it: the last report plus
// the dispatches booked since ([workers.Rank.Load]).
//
// # Eligibility (docs/design.md, Gates)
//
// A rank is eligible when its worker is live, passes the request's allow-list,
// carries every required taint ([Eligible]), and the rank lies in the worker's
// range. A pin must name such a worker and, unless it is [request.AnyRank], such a rank.
//
// # Queue gates (docs/design.md, Gates)
//
// A rank is busy for a class ([Gate.Busy]) when its prefill load is strictly
// above prefill_busy_threshold, or strictly above prefill_busy_threshold_frac ×
// max_num_batched_tokens (10,000,000 when unknown; compared as real numbers), or
// its worker is draining or excluded after a refusal, or the rank is full (at
// its worker's max_active_requests, counting bookings: [workers.Worker.Full]).
// A class without a threshold finds a rank busy only for those last three
// reasons. A class is gated
// when at least one eligible rank was checked and none is free, or, with
// busy_worker_ratio, when busy >= ratio × eligible. No eligible rank means not
// gated: the request goes on to selection and gets its error there.
//
// [Gates] keeps, per class, the number of live ranks busy for it, so that the
// gate of an unconstrained request is O(1), as docs/design.md, DRR needs for a bounded DRR
// call. The caller must call [Gates.Update] after every change to a worker's
// load or state (report, booking, release, exclusion, and bookings dropped by
// [workers.Registry.Expire]) and [Gates.Remove] when a worker is removed. A
// pinned request checks only its target; a request with an allow-list or
// required taints recounts its eligible ranks.
//
// # Overload (docs/design.md, Worker selection)
//
// A rank is overloaded ([Thresholds.RankOverloaded]) when its prefill load is
// strictly above active_prefill_tokens_threshold, or above
// floor(active_prefill_tokens_threshold_frac × max_num_batched_tokens), or its
// decode latch is set, or it is full. A full rank is never a candidate, even
// on a worker that is not overloaded, and a request pinned to a full rank is
// pinned_worker_overloaded. [Thresholds.UpdateLatch] sets the latch when
// kv_used_blocks or active_decode_blocks exceeds active_decode_blocks_threshold ×
// total_kv_blocks and clears it when both are at or below; total_kv_blocks 0 or
// an unset threshold means no latch. Overload is decided per worker
// ([Thresholds.Overloaded]): a worker is overloaded when it is draining or
// excluded, or when every one of its ranks is; then none of its ranks is a
// candidate, while every rank of a worker with one free rank still is.
//
// # Selection (docs/design.md, Worker selection)
//
// [Selector.Select] fails, for a pin, in this order: not in the allow-list
// (pinned_worker_not_allowed, even when the worker is not live); not live, rank
// out of range, or a required taint missing (no_endpoints); overloaded
// (pinned_worker_overloaded). A pin with a rank takes that rank without scoring.
// Unpinned: nothing eligible (no_endpoints); every eligible worker overloaded
// (all_workers_overloaded; an idle worker that is not eligible does not help).
// Otherwise every eligible rank of every non-overloaded worker (of the pinned
// worker, for a pin without a rank) is scored, in blocks of block_size tokens:
//
//	raw_prefill    = (active_prefill_tokens + isl) / block_size
//	credit         = overlap_score_credit × overlap_tokens(worker) / block_size
//	request_blocks = ceil(isl / block_size)
//	cost = prefill_load_scale × max(0, raw_prefill − credit) + active_decode_blocks
//	       + request_blocks + decode_active_request_weight × active_requests
//	cost ×= exp(−tanh(sum of the preferred-taint weights the worker carries))
//
// so a preferred taint can at most divide a cost by e, and a negative weight
// multiply it by up to e. At temperature 0 the lowest cost wins, ties broken
// uniformly at random; above 0 the rank is drawn from a softmax over
// −(cost − min) / ((max − min) × T), uniform when all costs are equal.
//
// # Costs
//
// For W live workers with R ranks in all, C classes, and a request with an
// allow-list of A ids: Gate.Busy O(1); Gates.Update O(C × ranks of the worker);
// Gates.Remove the same; Gates.Gated and Gates.Free O(1); Gates.GatedFor O(1)
// unconstrained, O(ranks of the target) pinned, O(A² + their ranks) with an
// allow-list, O(R + W × required taints × log taints) otherwise;
// Thresholds.Overloaded O(ranks of the worker); Selector.Select O(R + W × preferred
// taints × log taints), and it does not allocate once its scratch space has grown.
// An unconstrained request at temperature 0, with 16 live workers or more, is
// placed from the rank index instead (index.go; docs/design.md, Worker
// selection index): O(ranks of the workers changed since the last Select ×
// log distinct loads) plus the buckets tied near the least cost, with the
// scan's decisions exactly.
//
// # Concurrency
//
// Not safe for concurrent use: a Gates or a Selector belongs to the goroutine
// that owns the registry it reads.
package filters
