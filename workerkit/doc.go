// Package workerkit is the Go helper a worker embeds to speak the worker's side of
// the fairdispatch wire contract (docs/protocol.md): it answers dispatches, keeps
// accepted requests alive, acknowledges them, and reports the worker's load.
//
// # A guided tour
//
// A worker builds a [Worker] with [New] from a connected *nats.Conn, a [Config],
// a [Handler] and a zerolog logger, then calls [Worker.Start]:
//
//	w, err := workerkit.New(nc, workerkit.Config{ID: "w1", DPSize: 2}, handler, log)
//	...
//	err = w.Start()
//	defer w.Close()
//
// Start subscribes (core NATS, in a queue group named after the id, so that
// two processes started by mistake under one id never both receive a
// dispatch) to <prefix>.work.<id>. The dispatcher sends each
// request there as a NATS request carrying the headers of docs/protocol.md, Dispatch handshake, or, since
// the helper's reports ask for it (unless Config.HeaderForm), as the frame of
// docs/protocol.md, Compact dispatch form, which spares both sides the NATS
// header block; the helper parses either into a [Request] and calls
// [Handler.Offer]. A dispatch without headers that is not a frame is refused
// with "Dispatch-Status: malformed" without calling Offer. Offer returns true to
// accept: the helper replies with an empty message, takes the request into its
// held set and sends +WPI to the request's Dispatch-Ack subject within
// Config.FirstProgressDelay (default 5 ms), if it is still held then: docs/protocol.md, Dispatch handshake's
// "at once", read so that a request finished within those milliseconds costs
// JetStream no progress acknowledgement, only its +ACK. Offer
// returns false to refuse: the helper replies with the header
// "Dispatch-Status: busy". A request whose Dispatch-DP-Rank lies outside
// [DPStart, DPStart+DPSize), or one arriving while the worker stops, is refused
// without calling Offer.
//
// The application then owns the accepted request. It calls exactly one of
// [Request.Done] (+ACK: finished; the JetStream message is removed),
// [Request.Nak] (-NAK: hand it back for dispatch elsewhere at once) or
// [Request.Term] (+TERM: drop it). Until then one loop, shared by all held
// requests, sends +WPI to each at least every third of the ack wait its
// dispatch carried in Dispatch-Ack-Wait-Ms (Config.AckWait for a dispatch
// without it, from an older dispatcher), so a request kept longer than the
// stream's ack wait is not redelivered.
//
// # Confirmed acknowledgements
//
// Done, Term and Nak send the literal JetStream bodies as NATS requests and
// return at once (docs/protocol.md, After accepting): the first attempt is a
// publish on the caller's goroutine, as a plain acknowledgement is, and the
// helper sends it again, from one goroutine and one inbox subscription for
// all requests (acker.go), until JetStream answers. A plain acknowledgement
// published around a NATS server restart or a reconnection can be lost
// (written to the dying connection, or flushed on reconnection before
// JetStream has recovered its consumer), and JetStream then redelivers the
// finished request after its ack wait; a confirmed one is sent again
// instead. +ACK and +TERM are sent again after an unanswered attempt (1 s) or
// a "no responders" answer (after 20 ms doubling to 500 ms); -NAK only after
// "no responders", since an unanswered one may have taken effect. While the
// connection is down nothing is sent; at reconnection every waiting
// acknowledgement goes at once. The helper gives up on one once the
// request's ack wait has passed and an attempt made while connected still
// went unanswered, or the connection closes, or Stop's grace runs out
// ([Stats].AcksUnconfirmed). [Request.DoneAfter] runs a function before each
// attempt, so a completion record can precede every one. Config.PlainAcks
// publishes plain acknowledgements instead, for a NATS user that may not
// subscribe to its inbox. [Request.DoneConfirmed] is the synchronous form: it
// waits for JetStream's answer (bounded by its context) and returns it;
// [Request.DoneSync] makes one attempt and waits for it.
//
// # Dispatches of a request running or finished
//
// Delivery is at least once: a request can be dispatched to the same worker
// again, while it runs (a lost acceptance, a late +WPI) or after it finished
// (an acknowledgement lost after all). The helper answers such dispatches
// itself, without calling Offer (docs/protocol.md, A second dispatch of a
// request already running; A dispatch of a request already finished): a
// dispatch of a running request (same Dispatch-Request-Id) is accepted and
// joined to the running execution, whose acknowledgement and keep-alive go to
// the latest delivery's subject, and whose [Request.PublishCompletion] adds a
// record of 0 tokens for each joined dispatch; a dispatch of a request it
// finished (Done or Term, not Nak) within FinishedWindow (5 minutes, at most
// FinishedIDs, 100,000 ids) is accepted and acknowledged at once as it was
// finished, with a record of 0 tokens when the request had one. [Worker.Stats]
// counts both. A dispatch of a request finished on another worker, or
// forgotten, runs again.
//
// # Load reports and seen_seq
//
// The application tells the helper its per-rank load with [Worker.SetLoad] and
// whether it drains with [Worker.SetDraining]. The helper publishes the JSON
// report of docs/protocol.md, Load report ([Report]) on <prefix>.load.<id> whenever the load changes
// (coalesced: at most one report every Config.MinReportInterval, default 2 ms,
// except that a report freeing capacity, a rank's active requests or prefill
// tokens below what was last reported or below their peak since, goes at once)
// and at least every TTL/3. A report whose only news is seen_seq (the load and
// the draining flag are as last reported) waits up to Config.SeenOnlyInterval,
// default 20 ms: the dispatcher counts those dispatches through its bookings
// meanwhile, and at high rates this spares one report per dispatch.
//
// seen_seq is computed by the helper: it is the highest Dispatch-Seq of any
// request whose Offer call has returned (accepted or refused). The contract that
// makes this correct is:
//
//	An Offer that returns true must have added the request to the load it gives
//	SetLoad before it returns.
//
// The dispatcher's view of a rank is the report plus every dispatch with a
// higher sequence, so a report must never claim a sequence its load does not
// yet count. The helper takes the load and seen_seq of a report under one lock,
// and publishes no report while an Offer call is in progress, so a report never
// carries a load that counts a request without its sequence either (no double
// counting). Refused requests advance seen_seq too: the dispatcher releases the
// booking of a refused request anyway. A request later finished (Done, Nak,
// Term) leaves the load and stays below seen_seq, which is what the dispatcher
// expects. The first report carries seen_seq 0, never omits it: a report
// without seen_seq would tell the dispatcher that it counts every earlier
// dispatch.
//
// Each Worker picks a random instance id at New; a worker restarted under the
// same id reports a new instance, which makes the dispatcher drop the bookings
// of its predecessor.
//
// # KV cache events
//
// An engine with a prefix cache calls [Worker.EnableKVEvents] before Start
// and then tells the helper each change of a rank's caches:
// [Worker.CacheStored], [Worker.CacheRemoved] and [Worker.CacheCleared], with
// the chained block hashes of docs/protocol.md, Block hashes. The helper
// gathers them into events numbered per rank, publishes them to the JetStream
// subject <prefix>.kv.<id>, and resynchronises a rank (through
// [KVConfig.Resync] and [Worker.CacheResync]) at start, when the dispatcher
// asks on <prefix>.kvsync.<id>, and when an event was lost (docs/protocol.md,
// Worker side: the Go helper and the mock worker). One goroutine publishes;
// Stop publishes what is gathered and waits up to 5 s for JetStream's
// acknowledgements.
//
// # Responses and cancellation
//
// A producer may ask for the worker's response with Dispatch-Response-To
// (docs/protocol.md, Responses). [Request.Response] then returns a
// [Response], nil otherwise. As soon as the request is accepted the helper
// claims the response (a NATS request to the producer); the application
// calls [Response.Start], which waits for the answer and returns nil when
// the request may run. It then writes chunks with [Response.Write] (the
// helper frames and numbers them) and closes with [Response.End] (the end
// marker with the status and usage, then a confirmed +ACK, or +TERM for
// status cancelled). While the response is open the helper pings the
// producer every second.
//
// The helper ends an accepted request on its own when the producer answers
// cancel or taken, when nobody listens any more (a claim or ping finds no
// responders, or pings go unanswered), when the dispatcher forwards a
// cancellation on <prefix>.cancel.<id> (any request, with or without a
// response), and when Stop's grace runs out. It does what docs/protocol.md,
// What a worker does with each answer, says (the end marker, +TERM, -NAK, or
// nothing at all for taken), then cancels [Request.Context] with the cause
// (ErrCancelled, ErrNoListener, ErrTaken, ErrStopped) and calls the
// handler's Cancelled when it implements [CancelHandler]. The application
// only has to stop working; its later Write, End, Done, Nak or Term calls
// return an error wrapping ErrFinished.
//
// With [Config.Preempt] the load reports declare preemption support
// (docs/protocol.md, Preemption) and a cancellation with reason preempt for
// the running dispatch (its request id and Dispatch-Seq) hands the request
// back (-NAK, no end marker) if no response chunk was written, ending its
// context with ErrPreempted; after a chunk the helper ignores it and the
// request runs to its end. Without Config.Preempt a preempt is ignored.
//
// An application that knows nothing of responses keeps working: Done ends
// the response with status ok, Term with status failed, and Nak hands the
// request back before its first chunk (after it, Nak returns
// ErrResponseStarted). Each execution claims its response, and the newest
// claim wins until a chunk is seen: a redelivery that runs the request again
// (its first execution died, or was handed back) claims anew. A second
// dispatch of a request still running here claims nothing: it joins the
// running execution (docs/protocol.md, A second dispatch of a request
// already running).
//
// Claims, pings and end markers share one inbox subscription (asker.go), so
// an open response costs one runtime timer, no goroutine.
//
// # Stopping
//
// [Worker.Stop] marks the worker draining, reports it, stops taking requests
// (later arrivals are refused busy), waits until every held request is finished
// or ctx ends, hands back (-NAK) whatever is still held (a response with a
// chunk written is ended with status failed and dropped instead: it must not
// run again), publishes a last report and returns. [Worker.Close] is Stop with
// no wait.
//
// # Concurrency
//
// A Worker is safe for concurrent use. Offer is called from one goroutine (the
// subscription's), in arrival order, and must not block: queue the work and
// return. Request and Response methods may be called from any goroutine. The
// helper runs four goroutines per Worker (the report loop, the two progress
// loops and, unless Config.PlainAcks, the acknowledgements' retrier) and none
// per request; its timers (pings, claim retries,
// answer timeouts) run their callbacks on goroutines of their own while
// they fire.
package workerkit
