// Package gateway is the OpenAI-compatible HTTP API in front of one or more
// pools (cmd/gateway): POST /v1/chat/completions and POST /v1/completions,
// streaming by server-sent events or not, GET /v1/models and
// GET /v1/models/{model}. Each request
// becomes one fairdispatch request (package caller), its response is relayed
// to the client as the worker streams it.
//
// # A request's way
//
//  1. Authenticate: the bearer key's SHA-256 names a tenant of the file
//     (Config); none: 401.
//  2. Read the body within the limits: over MaxBodyBytes 413; not UTF-8,
//     nested too deep, a field too large, max_tokens over the model's
//     bound: a 400. An unknown model: 404.
//  3. Decide: the class (X-Fairdispatch-Class if the tenant may use it, else
//     403; default the tenant's), the priority and deadline (headers within
//     the tenant's bounds, else its defaults), the fairness key (the tenant's
//     name), the input length (a tokenizer's exact count and block hashes, or
//     the estimate, tokens.go), the request id (from the tenant and its
//     Idempotency-Key, else random). The tenant's requests in flight on this
//     gateway are bounded (429 past MaxConcurrent).
//  4. Publish (caller.Start) with the normalised body: the engine's model
//     name, include_usage on for a stream, a default max_tokens. Not stored:
//     503, safe to retry. Deduplicated by JetStream (a retry with the same
//     Idempotency-Key): the call attaches to the first attempt's response,
//     or answers 409 when nothing of it is heard within AttachWait.
//  5. Relay: a rejected outcome becomes its status (errors.go); chunks are
//     written as they arrive, the end closes with data: [DONE]; after the
//     first chunk an error is an SSE error event. A client that goes away
//     (its context ends, or a write fails or times out) closes the call,
//     which cancels the request and stops answering its worker.
//
// # State
//
// The server keeps no request state beyond each open connection's call and
// the count of each tenant's requests in flight: gateways run side by side,
// and one that dies loses only its own connections, whose workers find
// nobody answering their pings and stop.
//
// # Concurrency
//
// A Server is safe for concurrent use: each HTTP request runs on its own
// goroutine, shares only the counters (atomics) and the metrics.
package gateway
