// Package lanes is one policy class's queue (docs/design.md, Lanes): the requests of
// the class ordered for dispatch, split into lanes so that a request that cannot
// be dispatched yet holds up only the requests that would wait for the same thing.
// A [Class] implements drr.Queue, so the DRR arbiter (package drr) picks the class
// and the class picks its candidate.
//
// # Order
//
// Within a class every comparison is [request.Snapshot.Before] (docs/design.md, Lanes): higher
// strict priority first, then higher score, then lower seq. The score is computed
// once, when the request is admitted, from the class's queue policy:
//
//   - FCFS: score = jump - arrival_seconds. A priority jump of N seconds ranks the
//     request as if it had been published N seconds earlier.
//   - WSPT: score = (1 + jump) / cost. Short requests go first; a jump scales the
//     weight.
//
// Strict priority beats any score: a request of strict tier 1 precedes one of
// tier 0 whatever their scores (a jump of 10,000 s does not cross a tier). Strict
// priority never crosses classes: the arbiter picks the class first.
//
// # Lanes
//
// A class holds one shared lane, a binary heap of the unpinned requests (those with
// an allow-list too), and one heap per pinned target, keyed by the request's
// [request.Target]: (worker, rank), or (worker, [request.AnyRank]) for a pin
// without a rank. A pinned lane exists only while it holds a request; emptied lanes
// are kept on a free list and reused.
//
// The heads of the pinned lanes not known to be blocked sit in an ordered index (a
// heap of lanes keyed by their heads). A lane whose head was found not
// dispatchable moves to the blocked set, grouped by worker id, and returns to the
// index only on [Class.Recheck] of its worker or [Class.RecheckAll] (its worker's
// state changed, docs/design.md, When queues are re-checked), or when a push gives it a new head (which may be
// dispatchable where the old one was not). Removing a blocked lane's head does not
// return the lane to the index: the next head waits for the same target, and a
// recheck brings it back.
//
// The class candidate (docs/design.md, Lanes) is the better, by Before, of
//
//   - the shared head, if the [Checker] says it is dispatchable, and
//   - the best dispatchable pinned head: the best indexed head; while it is not
//     dispatchable its lane moves to the blocked set and the next best is tried.
//
// Head-of-line blocking is lane-local: a lane never looks past its own head, so a
// blocked shared head keeps every shared request waiting, but no pinned lane, and a
// blocked pinned lane holds up only itself. When the shared head already outranks
// the best indexed head, the pinned lanes are not examined at all.
//
// [Class.Candidate] reports the DRR cost of the candidate
// ([request.Snapshot.DRRCost]: 0 for a request already charged before a refused
// dispatch handed it back); [Class.Pop] removes it and [Class.Last] returns it.
//
// # Invariants
//
//   - Every queued request's Index is its position in its lane's heap; a request
//     not queued (never pushed, removed or popped) has Index -1.
//   - Every lane heap satisfies the heap property under Before; the index does too,
//     comparing lane heads, and every indexed lane knows its position.
//   - Every pinned lane is non-empty and is in exactly one of the index and the
//     blocked set. The shared lane is in neither: its head is checked on every
//     Candidate call.
//   - Len and Tokens are the count and the raw ISL and cached token sums of the
//     queued requests.
//
// # Cost
//
// For n requests in a lane, L indexed lanes and k blocked lanes of one worker:
//
//   - [New], [Class.Len], [Class.Empty], [Class.Tokens], [Class.Last]: O(1).
//   - [Class.Push]: O(log n + log L); O(k) more when the push unblocks its lane.
//   - [Class.Remove], [Class.Pop]: O(log n + log L); O(k) more when a blocked lane
//     empties.
//   - [Class.Candidate]: one Checker call for the shared head, plus one per pinned
//     lane examined; each blocked lane it moves aside costs O(log L). A lane is moved
//     aside at most once between rechecks, so the moves are paid for by the
//     pushes and rechecks that put the lanes in the index.
//   - [Class.Recheck]: O(k log L). [Class.RecheckAll]: that for every worker.
//   - [Class.Lanes]: O(number of workers with blocked lanes). [Class.Each]: O(total).
//
// Heaps and the index keep their storage and emptied lanes are reused, so a class
// whose size and targets are steady allocates nothing (package drr's
// BenchmarkArbiter checks this). Push allocates when a heap grows or a target
// needs a lane; Candidate when it starts a worker's blocked list.
//
// # Concurrency
//
// A Class is not safe for concurrent use. It has no goroutines, locks, clocks or
// I/O: the queue actor owns it, and the Checker is called synchronously from
// Candidate.
package lanes
