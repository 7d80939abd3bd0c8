// Package lanes is one policy class's queue (docs/design.md, Lanes): the requests of
// the class ordered for dispatch, split into lanes so that a request that cannot
// be dispatched yet holds up only the requests that would wait for the same thing.
// A [Keyed] class implements drr.Queue, so the DRR arbiter (package drr) picks
// the class and the class picks its candidate. Its requests are split by
// fairness key (below); a class whose requests name no key is the one-key case,
// and everything said of lanes here holds for each key.
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
// A key of a class holds one shared lane, a binary heap of the unpinned requests (those with
// an allow-list too), and one heap per pinned target, keyed by the request's
// [request.Target]: (worker, rank), or (worker, [request.AnyRank]) for a pin
// without a rank. A pinned lane exists only while it holds a request; emptied lanes
// are kept on a free list and reused.
//
// The heads of the pinned lanes not known to be blocked sit in an ordered index (a
// heap of lanes keyed by their heads). A lane whose head was found not
// dispatchable moves to the blocked set, grouped by worker id, and returns to the
// index only on [Keyed.Recheck] of its worker or [Keyed.RecheckAll] (its worker's
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
// [Keyed.Candidate] reports the DRR cost of the candidate
// ([request.Snapshot.DRRCost]: 0 for a request already charged before a refused
// dispatch handed it back); [Keyed.Pop] removes it and [Keyed.Last] returns it.
//
// # Fairness keys
//
// A class has a level between itself and its requests
// (docs/design.md, Fairness keys): class -> fairness key -> request. Each
// request carries a key (Snapshot.Key; "" is [DefaultKey]); each key of the
// class holds its own shared heap and its own pinned lanes, as Lanes says. The DRR arbiter still picks the class; inside it, the key with the least
// normalized service among the keys with a dispatchable request supplies the
// candidate; inside the key, Before decides (strict tier, score, seq). So strict
// priority orders a key's own requests only: no key can jump another.
//
// The algorithm is start-time fair queuing (P. Goyal, H. Vin and H. Cheng,
// "Start-time Fair Queuing", SIGCOMM 1996) over keys instead of flows, with
// service counted at dispatch, in DRR cost units, and corrected at completion:
//
//   - Each key k has a weight w_k ([KeyConfig]) and a normalized service v_k:
//     the cost charged to it divided by w_k, plus settlement corrections
//     ([Keyed.Settle]: (actual - charged) / w_k).
//   - The class's virtual time V is the largest v at which a key was served.
//     A key that becomes backlogged (its first queued request, or its first
//     after it went idle) starts at max(v_k, V): idle time earns no credit. An
//     idle key owed no settlement is forgotten; if it comes back it starts at V.
//   - Candidate takes the key with the least (v, order) among the keys with a
//     lane not known to be blocked (order: when the key last became backlogged);
//     if it has a dispatchable request, that is the candidate; else the key
//     leaves the key heap, keeping its v, and the next one is tried.
//   - Pop charges the key cost / w_k (the DRR cost: 0 for a request handed back
//     after a refused dispatch, already charged).
//
// Bound. Between two keys A and B that stay backlogged and dispatchable over
// an interval, |S_A/w_A - S_B/w_B| <= 2*Cmax/min(w_A, w_B) plus the settlement
// corrections applied meanwhile (S: cost served in the interval; Cmax: the
// largest request cost). Proof sketch, without corrections: a key is served
// only when its v is the least among the dispatchable keys, so at that moment
// v_k <= V and, after the charge, v_k <= V + Cmax/w_k; V never decreases and
// every dispatchable key has v >= V (it was >= the served one each time a key
// was served, and a returning key starts at V). Hence at every moment
// V <= v_A <= V + Cmax/w_A and the same for B, so |v_A - v_B| <= Cmax/min(w).
// Over the interval S_A/w_A - S_B/w_B is the change of v_A - v_B (no lift
// happens to a key that stays backlogged), so it is at most twice that. The
// property test TestKeyedBound checks it on random weights and costs, and
// TestClassFloodUnfair shows the same check failing on a class that queues
// every request under one key.
//
// Blocked lanes keep their meaning: a key whose lanes are all blocked leaves
// the key heap and keeps its standing (its v is not lifted when it returns;
// docs/decisions.md, Fairness keys), so the bound covers it again once it has
// caught up with V. Refused heads: a pinned lane moves to the blocked set of
// its worker as Lanes says; an unconstrained shared head refused (the class is
// gated) puts its key in a gated list that one Checker call on any of them
// reopens (the Checker must answer alike for every unconstrained, unpinned
// request, as the class gate does); a constrained shared head (allow-list,
// required taints) waits for the next Recheck of any worker.
//
// Memory is bounded by the keys backlogged or owed a settlement (a popped
// request's key stays until [Keyed.Settle] or [Keyed.Release]); with
// KeyConfig.MaxKeys keys tracked, new keys share [OverflowKey] (the request's
// Key is rewritten). A key costs 136 bytes plus its map entry and 24-byte heap entry,
// about 175 bytes in all (TestKeyedBytesPerKey); forgotten keys are reused. The
// key heap (internal/iheap) holds entries that carry a copy of (v, order), so a sift reads
// one array rather than the keys.
//
// Cost, for K keys with an open lane, n requests in a lane and L lanes of a key:
//
//   - [Keyed.Push], [Keyed.Remove], [Keyed.Pop]: O(log n + log L + log K).
//   - [Keyed.Candidate]: one Checker call for the gated keys, then per key
//     examined one call for its shared head plus one per pinned lane examined,
//     and O(log K) for each key set aside; set-aside keys and lanes are paid for
//     by the pushes and rechecks that brought them back. Reopening g gated keys
//     costs O(g log K).
//   - [Keyed.Settle], [Keyed.Release]: O(log K).
//   - [Keyed.Recheck]: O((b + s) log K) for b blocked lanes of the worker and s
//     keys with a constrained shared head refused.
//   - [Keyed.Mark], [Keyed.EachSince]: O(K). They measure the service each key
//     gained over a window (docs/design.md, Key fairness window): Mark records
//     every backlogged key's v in one of two slots; EachSince reports v minus
//     that for the keys backlogged ever since (their order, taken when they
//     became backlogged, is not after the mark's). Nothing is done per dispatch.
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
// For n requests in a lane, L indexed lanes of a key and k blocked lanes of one
// worker, the lanes part of each operation (the key level adds what Fairness
// keys says):
//
//   - [NewKeyed], [Keyed.Len], [Keyed.Empty], [Keyed.Tokens], [Keyed.Last]: O(1).
//   - Push: O(log n + log L); O(k) more when the push unblocks its lane.
//   - Remove, Pop: O(log n + log L); O(k) more when a blocked lane empties.
//   - Candidate: one Checker call for the shared head, plus one per pinned
//     lane examined; each blocked lane it moves aside costs O(log L). A lane is moved
//     aside at most once between rechecks, so the moves are paid for by the
//     pushes and rechecks that put the lanes in the index.
//   - Recheck: O(k log L). [Keyed.RecheckAll]: that for every worker.
//   - [Keyed.Lanes]: O(number of workers with blocked lanes). [Keyed.Each]: O(total).
//
// Heaps and the index keep their storage and emptied lanes are reused, so a class
// whose size and targets are steady allocates nothing (package drr's
// BenchmarkArbiter checks this). Push allocates when a heap grows or a target
// needs a lane; Candidate when it starts a worker's blocked list.
//
// # Concurrency
//
// A Keyed class is not safe for concurrent use. It has no goroutines, locks, clocks or
// I/O: the queue actor owns it, and the Checker is called synchronously from
// Candidate.
package lanes
