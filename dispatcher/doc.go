// Package dispatcher is the queue actor: one goroutine that owns the scheduling
// core (package scheduler) and drives the adapters around it.
//
// The actor's loop is a single select over request deliveries (ingest), load
// reports, handshake answers (bus), dead-letter acknowledgements, threshold
// changes from the admin API, connection events, a timer and shutdown. After
// every event it asks the scheduler for the next dispatch until nothing queued
// is dispatchable (docs/design.md, When queues are re-checked). Adapters only carry out what it decides: the
// actor never blocks on I/O, and nothing else touches the scheduler.
//
// Life of a request: a delivery is admitted (queued, sent, or rejected); while
// it is held, ingest.Keeper keeps its message from redelivery; a dispatch is
// sent as a core NATS request and stays held until the worker answers; an
// accepted request leaves the dispatcher (the worker owns its message now); a
// refused one goes back to its lane; a rejected one is dead-lettered, and its
// message is acknowledged only once the DLQ copy is stored (docs/design.md, Delivery guarantees).
//
// Fleet outage (docs/design.md, Fleet outage): while the scheduler says no
// worker is live, the actor closes the pull gate (ingest.Gate), so the backlog
// waits in the stream, and logs one warning; the scheduler holds the queued
// requests and the Keeper keeps them alive. The first report of a worker opens
// the gate and dispatch resumes at once.
//
// The admin API reads immutable snapshots the actor publishes (View,
// Thresholds), never live state.
package dispatcher
