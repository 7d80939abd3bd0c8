// Package drr is the weighted Deficit Round Robin arbiter that decides which policy
// class dispatches next (docs/design.md, DRR). Within a class, order is the class's own
// business (package lanes); drr only sees, per class, whether it is empty, the cost
// of its candidate if it has a dispatchable one, and a way to pop that candidate.
//
// # Algorithm
//
// Deficit Round Robin comes from M. Shreedhar and G. Varghese, "Efficient Fair
// Queuing using Deficit Round Robin", SIGCOMM 1995. Each class k has a quantum q_k
// (credit per round, in cost units: uncached tokens) and a deficit d_k (credit
// earned and not yet spent). Classes sit on a ring in policy-file order; a round
// gives every backlogged class one quantum, and a class may send its head when the
// head's cost fits in its deficit, paying the cost. Over time each backlogged class
// receives service in proportion to its quantum, whatever its request sizes.
//
// One call of [Arbiter.Next] returns at most one request:
//
//  1. Nothing queued in any class: clear the carry, return nothing.
//  2. Carry: if a carry class is set and its candidate's cost <= its deficit, take
//     it, adding no quantum.
//  3. Ring scan, once round from the cursor. Empty class: deficit 0, next. Nothing
//     dispatchable: keep the deficit, add nothing, next. Cost <= deficit: take it.
//     Else add one quantum; cost <= deficit: take it; else next (the quantum stays).
//  4. Bulk credit: if no class has a dispatchable candidate, return nothing.
//     Else R = min over those classes of ceil((cost - deficit) / quantum), and each
//     of them gets R * quantum.
//  5. Final scan from the cursor: take the first class whose candidate is
//     affordable (there is one: the class that set R).
//
// After taking from class k: cursor = k+1 (mod the number of classes); d_k -= cost;
// if the class is now empty d_k = 0 and there is no carry, else if d_k > 0 class k
// becomes the carry, else there is no carry.
//
// # Differences from the 1995 algorithm
//
//   - One request per call, and the carry. The classic algorithm serves a queue
//     until its head no longer fits and then moves on. Here each call returns one
//     request, so a class's burst continues across calls through the carry: a
//     class left with credit (and work) is asked first next time and spends that
//     credit without a new quantum. Credit is still granted per round, never per
//     request (a quantum per request would let small requests outearn their
//     cost). So quantum 10 with costs 3,3,3,3 dispatches three (deficit 10, 7, 4,
//     1) and then the ring moves on with deficit 1 kept. The seed describes this
//     as "the cursor stays on the class"; docs/design.md, DRR moves the cursor to k+1 on every
//     take and uses the carry instead, and this package follows docs/design.md, DRR: once the
//     carry's burst ends, the scan resumes after it.
//   - Blocked classes. A class with queued work but no dispatchable candidate keeps
//     its deficit and earns nothing, so it cannot build an unbounded burst while
//     blocked, and does not stop the others (work conserving over dispatchable
//     classes).
//   - Bulk credit. When one ring scan takes nothing, the classic algorithm would
//     keep going round, one quantum each time: a request costing many quanta would
//     make a call take time proportional to its cost. Step 4 computes how many such
//     rounds are needed before somebody can pay and grants them at once, each class
//     scaled by its own quantum, so the weighting and the outcome are those of the
//     round-by-round loop (the tests check this against such a loop). Example:
//     standard (quantum 1000, head 7000) and latency (quantum 2000, head 9000), both
//     at deficit 0: the ring scan leaves them at 1000 and 2000, R = min(6, 4) = 4,
//     standard reaches 5000 and latency 10000, and latency dispatches keeping 1000.
//
// # Reading of docs/design.md, DRR where it leaves room
//
//   - A call that falls through step 2 (the carry class is empty, blocked or cannot
//     afford its candidate) does not clear the carry on its own. If the call then
//     takes from another class, the rule after a take sets the carry afresh (that
//     class, or none); if it takes nothing, "a call that takes nothing leaves cursor
//     and carry as they were" keeps it. Keeping it is harmless: the carry only ever
//     lets a class spend credit it already holds.
//   - Step 1 clears only the carry, as written; it does not zero deficits. An empty
//     class can hold a deficit only when requests left it without the arbiter (a
//     deadline expiry, say); the next ring scan that visits it while it is empty
//     clears its credit (a debt stays: see Settlement and debt).
//   - A call that takes nothing also leaves every deficit alone except that step 3
//     clears the credit of the empty classes it visits: that is step 3's rule, and
//     step 4's "change nothing" is read as "grant no bulk credit".
//   - A candidate of cost 0 (for instance a request put back after it was already
//     charged) is affordable with deficit 0 and is taken without earning a quantum.
//   - Zero classes is allowed: Next then always returns nothing.
//
// # Settlement and debt
//
// [Arbiter.Charge] applies a completion's correction, actual minus charged cost
// (docs/design.md, Cost settlement), to a class's deficit, which may then go
// below zero, down to [MinDeficit] (-2^40). A class in debt is arbitrated as any
// other: step 3 adds a quantum while deficit < cost, and step 4's
// R = ceil((cost - deficit) / quantum) counts the debt, so the class earns quanta,
// round by round, until it can pay; the others are not held up meanwhile. An
// empty class loses its credit (deficit 0, as in the 1995 algorithm) but keeps
// its debt (min(deficit, 0)): otherwise a class that empties between a dispatch
// and its completion would never pay its corrections (docs/decisions.md).
//
// # Invariants
//
//   - Without corrections: 0 <= d_k, and d_k < c_k + q_k where c_k is the largest candidate cost class k
//     has been asked to pay: step 3 adds a quantum only when d_k < cost, and step 4
//     gives each class R*q_k with R <= ceil((cost_k - d_k)/q_k), so
//     d_k + R*q_k < cost_k + q_k. With costs and quanta up to 2^40 a deficit stays
//     below 2^41; the additions still saturate rather than wrap for larger inputs.
//   - With corrections: MinDeficit <= d_k, and d_k < c_k + q_k plus the refunds
//     (negative corrections) applied to it. Deficits are int64; costs and quanta
//     above 2^42 are read as 2^42, so no sum wraps.
//   - A charge never takes a deficit below cost - cost: a class is taken only
//     when cost <= d_k.
//   - A class that is empty after a take has d_k <= 0; the carry, when set, names a
//     non-empty class with d_k > 0 at the time it was set.
//   - A blocked class's deficit never grows.
//   - The cursor is in [0, number of classes) (0 with no classes); it and the carry
//     change only when a request is taken, or (the carry) when nothing at all is queued.
//
// # Cost
//
// [New] is O(C) for C classes. [Arbiter.Next] is O(C) arbiter work plus at most one
// Empty call per class (and one more on the class taken, after Pop), at most one
// Candidate call per class, and one Pop, whatever the costs and quanta; it does not
// allocate. [Arbiter.Deficit], [Arbiter.Charge], [Arbiter.Cursor] and
// [Arbiter.Carry] are O(1).
//
// # Concurrency
//
// An Arbiter is not safe for concurrent use. It has no goroutines, locks, clocks or
// I/O: the queue actor owns it and the queues it is stepped over.
package drr
