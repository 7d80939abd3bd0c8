// Package bus is the dispatcher's NATS adapter: it connects, makes sure the
// streams exist, sends dispatched requests to workers and reports their
// answers, dead-letters rejected requests, publishes outcomes and delivers
// load reports. It carries out what the queue actor decides and decides
// nothing itself: no retries of dispatches, no choice of worker, no parsing of
// load reports. It never panics; failures are returned or delivered as values.
//
// # A guided tour
//
// Connect opens the connection (docs/config.md, Flags and environment): the first connection is retried with
// exponential backoff bounded by the caller's context, except a credentials
// rejection (ErrAuth), which fails at once. Afterwards the connection
// reconnects forever (nats.MaxReconnects(-1)); every state change is logged.
//
// EnsureStreams creates or updates <Q>_REQ ("<prefix>.req.*", work-queue
// retention) and <Q>_DLQ ("<prefix>.dlq.*", limits retention), docs/protocol.md;
// Q is the prefix upper-cased with '.' and '-' as '_' (DISPATCH for the
// default prefix). Every name comes from Subjects, which is naming.Names.
// Settings an operator added (limits, max age) are kept; a storage or
// retention change, which JetStream cannot make in place, is ErrStreamConflict.
//
// Handshaker is the dispatch handshake of docs/protocol.md, Dispatch handshake. Send publishes the request
// to "<prefix>.work.<worker>" with a reply subject under one wildcard inbox
// subscription; the answer, classified as Accepted, Refused, NoResponders or
// Timeout, is handed to a deliver function given at construction (the actor's
// non-blocking enqueue), exactly once per successful Send. Since every request
// has the same timeout, deadlines come in send order: they sit in a FIFO and
// one goroutine sleeps until the earliest. Send is O(1) amortized, each answer
// O(1), each expiry O(1) amortized; memory is O(requests sent within one timeout).
//
// DeadLetterer publishes dead letters (docs/protocol.md, Outcomes) with JetStream acknowledgement:
// at most DLQWindow unacknowledged at once, each retried until stored (with
// the same Nats-Msg-Id, so JetStream stores it once within its duplicate
// window), then done(nil) tells the actor it may acknowledge the request.
//
// PublishOutcome publishes the docs/protocol.md, Outcomes JSON to a request's Dispatch-Reply-To
// subject; SubscribeLoad hands every "<prefix>.load.<worker>" message to a
// function, unparsed.
//
// # Whose fault is an error
//
// Every error of Send, of Publish and its done function, and of
// PublishOutcome wraps one fault class (fault.go; docs/decisions.md, Whose
// fault is an error): ErrRequestFault when the message itself cannot be sent
// (over max_payload, a header name NATS cannot send: *RequestFault carries a
// reason fit for an outcome), ErrWorkerFault when the worker's subject cannot
// be published to, ErrConnectionFault for the rest. Fault returns the class;
// the actor branches on it, so that one request's fault never excludes a
// worker. Dead letters leave out headers NATS cannot send (listed in
// Dispatch-Headers-Dropped) and can be stored without the body (DropBody) or
// without any original header (Bare).
//
// # Wire details
//
// Dispatch-* header names are written in the spelling docs/protocol.md gives and read
// case-insensitively (Dispatch-Status). Header names starting "Nats-" belong
// to NATS: they are not copied onto dead letters, which get Nats-Msg-Id set to
// the request id. Stream names do not depend on the subject prefix.
//
// # Concurrency contract
//
// Every exported function and method is safe for concurrent use. Goroutines,
// none of them per request:
//   - Handshaker: one timer goroutine, plus the NATS client's delivery
//     goroutine of its inbox subscription. deliver is called from either (and
//     from Close for requests still in flight), possibly concurrently; it
//     must not block. No deliver call happens after Close returns.
//   - DeadLetterer: one goroutine that owns all letters and calls every done
//     function; done must not block. The NATS client's own goroutines hand it
//     acknowledgements through a mutex-guarded slice, never by blocking.
//   - SubscribeLoad: the NATS client's delivery goroutine of the
//     subscription calls fn, in arrival order; fn must not block for long.
//   - Connect: the NATS client's callback goroutine runs OnDisconnect and
//     OnReconnect; they must not block.
//
// Logs use the logger given, with component "bus" and the fixed keys
// request_id, class, worker_id, subject and stream_seq. Per-request events are
// logged at debug level only.
package bus
