// Package scheduler is the scheduling core composed: admission, the class
// queues with their fairness keys (package lanes), the DRR arbiter (package
// drr), eligibility, class gates, overload and worker selection (package
// filters), the worker registry (package workers) and, optionally, the KV
// cache index (package kvindex). It decides; it does no I/O. Time comes in as
// a now argument (Unix nanoseconds) and randomness from Config.Rand, so the
// same calls make the same decisions: the rules of docs/design.md are told as
// stories in the scenario files of testdata/ (commands, the scheduler's
// answers and its state as [Scheduler.Describe] prints it; testdata/README.md
// says how to read and regenerate them), and the virtual-time tests
// (sim_test.go, keys_sim_test.go, kv_sim_test.go) replay whole workloads.
//
// # Usage
//
// One goroutine owns a Scheduler (the queue actor, package dispatcher). It
// calls:
//
//   - [Scheduler.Arrive] for each request taken in. The [Decision] says what
//     to do now: Queued (keep its message alive), Dispatch (send it to the
//     chosen worker rank: the load is already booked under the returned
//     sequence number), or Reject (dead-letter it with the error).
//   - [Scheduler.Next] after every event, again and again while it returns a
//     decision: each call hands out at most one queued request (a dispatch, or
//     a rejection found at selection) and is bounded (docs/design.md, DRR).
//     None means nothing queued is dispatchable now; that is a state, not a
//     reason to block.
//   - [Scheduler.ApplyReport] for each valid load report (docs/protocol.md,
//     Load report). It re-checks that worker's blocked lanes and every class
//     gate, so the caller only calls Next afterwards.
//   - [Scheduler.Accepted] when a worker accepts a dispatch, [Scheduler.Return]
//     when it refuses, times out or has no responder (the request keeps its
//     place, uncharged; the worker backs off: docs/protocol.md, Refusals back
//     off), [Scheduler.Unsent] when the dispatch never reached the worker
//     through no fault of its own (docs/decisions.md, Whose fault is an error).
//   - [Scheduler.Tick] on a timer (the dispatcher uses 25 ms): workers whose
//     TTL ran out are removed, deadlines expire, and a fleet outage past the
//     no-workers timeout fails what is queued. Its rejections are returned.
//   - [Scheduler.RecheckAll] now and then (the dispatcher: once a second), the
//     safety net of docs/design.md, When queues are re-checked.
//   - [Scheduler.Settle] for each completion record (docs/protocol.md,
//     Completion records): the key's service and the class's deficit are
//     corrected by what the request really cost.
//   - [Scheduler.SetPolicy] for a new policy revision, between two Next calls;
//     then [Scheduler.Reclass] for each request in flight, with the returned
//     PolicyChange.
//   - [Scheduler.Pause] and [Scheduler.Resume] around a lost connection: no
//     worker's TTL runs out while the dispatcher cannot hear its reports.
//   - [Scheduler.Started] when a worker accepts a dispatch (with the
//     request), and [Scheduler.Preempt] at every tick: the preemptions to
//     ask, one worker and one request each (docs/design.md, Preemption;
//     preempt.go). A request handed back comes in again through Arrive, at
//     the head of its lane.
//
// # Invariants that cross packages
//
//   - A request is in at most one place: queued in exactly one lane of one
//     class (and then in the deadline heap when it has a deadline), or handed
//     out by Arrive or Next and owned by the caller until Return or Unsent puts
//     it back. Remove takes a queued request out (hand-back on lease loss).
//     A preempted request leaves the caller when its worker hands it back
//     and comes back from the stream as a new arrival.
//   - A request is charged to its class's deficit and its key's service once:
//     at its first dispatch. Return and Unsent re-queue it with Charged set, so
//     its DRR cost is 0 from then on; Settle corrects the charge later.
//   - A dispatch books its cost on the chosen rank under a per-worker sequence
//     number above any seen_seq that worker reported; a report whose seen_seq
//     covers it, a refusal, or the booking's age past the worker's TTL releases
//     it (package workers). Gates and selection read load as the report plus
//     the bookings.
//   - Nothing is dispatched or failed (except by its own deadline) during the
//     start-up grace, and nothing fails for want of workers while no worker is
//     live (docs/design.md, Fleet outage).
//
// # Cost
//
// Arrive: a class resolution (binary search over buckets), a gate check and,
// when it dispatches at once, a selection over the eligible ranks. Next: one
// DRR arbitration, O(C + L log L) for C classes and L lane heads visited, plus
// one selection. ApplyReport: O(ranks of the worker + its blocked lanes).
// Tick: O(expired workers + expired deadlines). Preempt: nothing unless the
// policy has a class that preempts and one that is sheddable. None of them
// allocates on the steady-state dispatch path.
//
// A Scheduler is not safe for concurrent use.
package scheduler
