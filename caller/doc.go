// Package caller is the producer side of the response path (docs/protocol.md,
// Responses and Cancellation): it publishes a request to
// <prefix>.req.<class> with JetStream's acknowledgement, follows the worker's
// response on a subject of its own, and cancels. The gateway uses it; so can
// any Go producer (a load generator, a test).
//
// # Usage
//
//	c, _ := caller.New(nc, caller.Config{Prefix: "dispatch"})
//	call, err := c.Start(ctx, caller.Request{ID: id, Class: "premium", Header: h, Body: body})
//	if err != nil { ... } // a *PublishError: JetStream did not store the request
//	defer call.Close()    // cancels the request unless it ended
//	for {
//		ev, err := call.Recv(ctx)
//		if err != nil { ... } // *RejectedError, *BrokenError, ErrCancelled, ctx.Err()
//		switch ev.Kind {
//		case caller.EventDispatched: // ev.Outcome: a worker accepted it
//		case caller.EventChunk:      // ev.Data: the next chunk, in order
//		case caller.EventEnd:        // ev.End: the end record; the call is over
//		}
//	}
//
// # Protocol
//
// Start subscribes to the response subject <ResponsePrefix>.<token of the
// request id> before it publishes (on the same connection, so the server has
// the subscription before the request), and names that subject in both
// Dispatch-Response-To and Dispatch-Reply-To: outcomes carry no
// Dispatch-Response header, the worker's messages always do. The subject is a
// function of the request id alone, so a retry of the same request (the same
// Nats-Msg-Id, deduplicated by JetStream, [Call.Duplicate]) listens where the
// first attempt's worker speaks, from whichever process retries.
//
// The call answers the worker's messages:
//
//   - claim: "go" while no chunk has been seen (a redelivered request's new
//     execution takes over from one that died before its first chunk); after a
//     chunk, "go" only to the execution that sent it and "taken" to any other;
//     "cancel" once the call ended or was cancelled.
//   - ping: "ok" from the current execution while the call is open, "taken"
//     from another, "cancel" once the call is over. Before any claim (a
//     duplicate whose first attempt's call answered it), a ping counting no
//     chunk makes its execution the current one ("ok": the call attaches),
//     and one counting chunks gets no answer: they went to the other call.
//   - chunk: kept when it comes from the current execution with the next
//     Dispatch-Response-Seq (1, 2, ...); a gap breaks the response.
//   - end: its Dispatch-Response-Seq must be one past the last chunk, or the
//     response broke (a lost last chunk).
//
// After the first chunk, silence from the execution (no chunk, ping or end)
// for Config.BrokenAfter (3 s: three ping intervals) breaks the response: the
// request is not run again, and Recv returns a [BrokenError] saying after how
// many chunks. Before the first chunk silence only means waiting: the request
// may be queued, or redelivered after a worker died.
//
// Cancellation: [Call.Cancel] and [Call.Close] publish {"request_id":...} on
// <prefix>.cancel (the dispatcher drops a queued request or tells the worker)
// and unsubscribe, so the worker's next claim or ping finds no responders:
// either path stops the work.
//
// # Concurrency
//
// A Caller is safe for concurrent use. A Call is driven by one goroutine
// (Recv); Cancel and Close may be called from any goroutine. Each Call's
// subscription callback runs on its own goroutine (nats.go's), and shares the
// call's state under a mutex; Recv waits on a channel, never on the callback.
//
// Memory: a call buffers at most Config.MaxBuffered chunks that Recv has not
// taken; beyond it the response is broken and cancelled (a reader too slow
// for its worker holds nothing).
//
// The package imports wire and naming only from this module.
package caller
