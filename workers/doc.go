// Package workers is the registry of live workers: it parses and validates their
// load reports, keeps each worker's last report, books the dispatches sent to it
// until a report counts them, and fences workers that stop reporting (docs/protocol.md, Load report).
//
// It is part of the deterministic core: no goroutines, locks, I/O or wall clock.
// Time comes in as a now argument (Unix nanoseconds) on every call that needs it.
//
// # Load reports
//
// [ParseReport] turns the JSON published on dispatch.load.<worker_id> into a
// [Report] with defaults applied (start rank 0, size 1, ttl_ms 3000, missing
// max_num_batched_tokens = 0 = unknown, missing ranks = zero load), or refuses it
// with a [*ReportError] whose [DropReason] labels the dropped-reports metric:
// it does not parse or lacks worker_id (parse), its worker_id is not the subject
// token (mismatch), it names a rank outside [start, start+size) or a rank twice
// (rank), or a field is out of bounds: ttl_ms outside [100, 600000], size 0,
// ranks past 65535, an invalid id or taint, more than [MaxTaints] taints
// (invalid). A refused report is never applied.
//
// # Reconciling reports with dispatches
//
// The dispatcher must see load rise the moment it dispatches, without counting
// a request twice once the worker's own report includes it. Every dispatch to a
// worker therefore gets a per-worker sequence number ([Registry.Book], the
// Dispatch-Seq header) and is booked on its rank: its prefill cost, and one
// active request. A report carries seen_seq, the highest sequence it already
// counts, and [Registry.Apply] keeps only the bookings above it. So the view of
// a rank ([Rank.Load]) is
//
//	reported load + sum of bookings with seq > seen_seq
//
// and the rules are:
//
//   - A report without seen_seq counts every earlier dispatch: all bookings go.
//   - Sequence numbers continue above every seen_seq received from the worker,
//     so a restarted or newly elected dispatcher (whose first report from the
//     worker may say seen_seq 1000) never reissues a number the worker counted.
//   - A worker restarted under the same id must not inherit its predecessor's
//     bookings: a change of instance, or a seen_seq lower than the previous
//     report's, drops them all. Sequence numbers still never go down.
//   - A booking older than the worker's ttl_ms is dropped in any case (by Apply
//     and by [Registry.Expire]), so a dispatch whose acceptance was lost cannot
//     inflate the load forever.
//   - A report that changes the worker's data-parallel range drops all bookings
//     (their ranks may no longer exist) and starts its ranks afresh.
//   - [Registry.Unbook] releases a booking at once when the worker refused the
//     dispatch or did not answer (docs/protocol.md, Dispatch handshake).
//
// # Liveness
//
// A worker is live from its first valid report and is removed by
// [Registry.Expire] once more than ttl_ms has passed since its last report
// (exactly ttl_ms after it, it is still live). While the dispatcher is
// disconnected ([Registry.Pause]) no TTL runs out; [Registry.Resume] restarts
// every worker's clock, and every booking's age, from the resume time.
// [Registry.MaxWorkers] caps the number of live workers: a report from
// a new worker beyond it is refused ([DropCapacity]), reports of live ones are not.
//
// # Refusals and exclusion
//
// [Registry.Refused] records a refused (or unanswered) dispatch and excludes
// the worker ([Worker.Excluded]) until [Worker.ExcludedUntil]: 10 ms for the
// first refusal since it last accepted, doubling with each refused probe up to
// 1 s ([MinExclusion], [MaxExclusion]). A refusal of a dispatch sent before the
// current exclusion began adds nothing (one burst, one refusal). After a
// refusal, every dispatch [Registry.Book] makes is a probe: the worker stays
// excluded until it is answered, so at most one offer is in flight.
// [Registry.Accepted] resets it all. Reports do not end an exclusion early;
// Apply and Expire end it once due (Expire lists the worker in Aged).
//
// # Instances
//
// The instance whose report made the worker live holds the id. A report from
// another instance is dropped (Change.Rival) while the holder is live and not
// draining, and counts as a restart once it is draining or has been silent
// for its TTL. Change.Conflict says when both instances are live: the holder
// reported while the other had reported within the TTL.
//
// # Capacity
//
// A report's max_active_requests ([Worker.MaxActive]) caps each rank:
// [Worker.Full] reports whether its reported plus booked requests reach it.
//
// # Invariants
//
//   - [Registry.All] is sorted by worker id; Get and All agree.
//   - A worker's bookings have strictly increasing sequence numbers, every one
//     above the last seen_seq received, and each rank's Booked and
//     BookedRequests are the sums over its bookings (saturating, never wrapping).
//   - A live worker has at least one rank; Ranks[i] is dp rank Start+i.
//
// # Costs
//
// For a worker with R ranks and B outstanding bookings, and W live workers:
// ParseReport O(size of the report + ranks) (ranks are at most the reported
// size); Apply O(R + B + log W), plus O(W) to insert a new worker; Book O(1)
// amortised; Unbook O(B); Expire O(W + dropped bookings); Resume O(W + B); Get
// O(1); All O(1).
//
// # Change journal
//
// Every call that can move a rank's load, a worker's exclusion or its
// liveness journals the worker once; [Registry.Changed] drains the journal, so
// that an index over the ranks (filters.Selector) updates only what moved. A
// field changed outside the registry needs [Registry.Touch]. The journal holds
// at most twice the live workers plus 64; past that it is dropped and Changed
// says to look at all of them.
//
// # Concurrency
//
// Not safe for concurrent use: one goroutine (the dispatcher's queue actor)
// owns a Registry and everything it returns.
package workers
