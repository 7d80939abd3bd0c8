// Package metrics holds the dispatcher's Prometheus collectors: one [Metrics]
// value, built once by [New] on a given registry, with a method per thing the
// dispatcher counts or measures. Every metric name starts with "fairdispatch_".
//
// # Metrics
//
//	name                                          type       labels
//	fairdispatch_pending_requests                 gauge      class
//	fairdispatch_pending_isl_tokens               gauge      class
//	fairdispatch_pending_cached_tokens            gauge      class
//	fairdispatch_drr_deficit                      gauge      class (cost units: uncached tokens)
//	fairdispatch_dispatched_total                 counter    class
//	fairdispatch_rejected_total                   counter    class, reason (docs/protocol.md, Outcomes error code)
//	fairdispatch_queue_wait_seconds               histogram  class (publication to acceptance)
//	fairdispatch_dead_letters_total               counter    class
//	fairdispatch_handshakes_total                 counter    outcome
//	fairdispatch_load_reports_dropped_total       counter    reason
//	fairdispatch_load_reports_coalesced_total     counter
//	fairdispatch_worker_booked_prefill_tokens     gauge      worker
//	fairdispatch_worker_reported_prefill_tokens   gauge      worker
//	fairdispatch_worker_overloaded                gauge      worker (0 or 1)
//	fairdispatch_live_workers                     gauge
//	fairdispatch_held_messages                    gauge
//	fairdispatch_redelivered_messages_total       counter
//	fairdispatch_progress_acks_total              counter
//	fairdispatch_nats_connected                   gauge      (0 or 1)
//	fairdispatch_startup_grace_over               gauge      (0 or 1)
//	fairdispatch_lease_renewal_failures_total     counter
//
// docs/config.md, Metrics lists every metric, among them those of [KV] (the
// KV cache index) and [Storage] (the JetStream storage the dispatcher
// depends on).
//
// Every series whose label values are known up front exists from the start at
// zero: each class of the policy, each class x error code of rejected_total
// (plus the unresolved class), each handshake outcome and each drop reason. So
// rate() and absent() work before the first event.
//
// # Class indices
//
// The hot path names a class by its index in the classes given to [New] (the
// policy's order), never by name: [New] resolves every labelled child once and
// keeps it in a slice, so [Metrics.Dispatched], [Metrics.Rejected],
// [Metrics.QueueWait] and [Metrics.DeadLetter] are a bounds check, a slice index
// and an atomic add, with no allocation and no map lookup.
//
// A request whose class could not be resolved (docs/design.md, Class resolution) has class index
// [Unresolved] (-1); it is counted under class="" (the empty label value), not
// under the subject token it arrived on, so a producer cannot create series at
// will. Any index outside [0, len(classes)) is treated as unresolved by the
// counters that can see an unresolved request (Rejected, DeadLetter) and ignored
// by the others (Dispatched, QueueWait, SetClass).
//
// # Per-worker series
//
// Worker ids come and go. [Metrics.SetWorkers] takes the whole set of live
// workers, sets their three gauges and deletes the series of every worker it set
// before that is no longer in the set, so a departed worker's last value does not
// linger. Its cost is O(workers).
//
// # Concurrency
//
// The methods that take a class index (Dispatched, QueueWait, Rejected,
// DeadLetter, SetClass, SetOldestQueued, SetKeyFairness) read the class list,
// which SetClasses replaces without a lock; so they, SetClasses and Classes
// belong to the one goroutine that owns the scheduler (the queue actor). Every
// other method is safe for concurrent use: SetWorkers serialises on a mutex,
// the rest are lock-free (the Prometheus collectors are atomic).
package metrics
