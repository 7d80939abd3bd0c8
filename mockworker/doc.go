// Package mockworker is an engine simulator built on the worker helper: a stand-in for
// an LLM inference engine (in the spirit of an engine's CPU mocker) that tests,
// the load generator and cmd/mockworker run in-process or as a process.
//
// # Model
//
// Each data-parallel rank has MaxNumSeqs sequence slots and a FIFO waiting
// queue. An accepted request waits until a slot is free, then prefills its
// uncached tokens at PrefillTokensPerSec, then decodes: the first output token
// comes out of prefill (as in a real engine), each further one takes
// DecodePerToken. Sequences are independent: each prefill takes
// uncached/PrefillTokensPerSec whatever the others do (no shared prefill
// budget; MaxNumBatchedTokens is only reported). When a request finishes the
// worker publishes a [Completion] on <prefix>.done.<worker_id> and
// acknowledges the request with a confirmed acknowledgement
// (workerkit.Request.DoneAfter: +ACK sent as a request and sent again by the
// helper, in the background, until JetStream answers), with an identical
// copy of the record ahead of each retry (so the confirmed attempt follows a
// copy in the same connection even when an earlier one was lost with a
// server; subscribers dedupe identical records). So an acknowledgement lost
// around a server restart does not leave a finished request to be
// redelivered and completed twice, and a worker killed between its record
// and its acknowledgement causes a redelivery, never a lost request (at
// least once, docs/design.md, Delivery guarantees). Config.PlainAcks
// acknowledges with plain publishes instead (no inbox needed, but an
// acknowledgement can be lost).
//
// A dispatch of a request the worker runs or finished within
// workerkit.FinishedWindow never reaches the engine: the helper joins it to
// the running execution, or acknowledges it at once, and gives its
// dispatch a completion record of 0 tokens (docs/protocol.md, A second
// dispatch of a request already running; A dispatch of a request already
// finished).
//
// The uncached tokens of a request are its Dispatch-Cost when present (so the
// reported load equals what the dispatcher booked), else Dispatch-ISL-Tokens
// minus Dispatch-Cached-Tokens, clamped at 0.
//
// The load of a rank (docs/protocol.md, Load report): active_prefill_tokens sums the uncached tokens
// of requests waiting or prefilling; active_requests counts requests received
// and not finished; kv_used_blocks sums ceil((isl + output)/BlockSize) over
// running requests and active_decode_blocks the same over decoding ones.
//
// With Config.KVCapacity each rank has a simulated prefix cache
// (prefixcache.go): an LRU device tier of KVCapacity blocks and an optional
// LRU host tier of KVHostCapacity blocks receiving the device's evictions. A
// request carrying Dispatch-Block-Hashes is looked up when accepted (the
// longest prefix held in either tier is cached), its blocks are stored on the
// device, and its uncached tokens are its ISL minus the cached prefix (in
// place of Dispatch-Cost). The changes go out as KV cache events through the
// helper, which the worker answers resynchronisation requests for under its
// lock. [Worker.CacheStats] gives the hit rate; the completion record carries
// cached_tokens.
//
// With Config.Model each rank is instead a continuously batched engine
// (package mockworker/batching, wired in batched.go): chunked prefill
// sharing steps with decodes, decode steps that slow with the batch, a KV
// block pool that is also the prefix cache, and timings fitted to a
// published benchmark, scaled by the model's Speedup. The completion record
// then carries the engine's own first_token_at.
//
// # Responses and cancellation
//
// A request with Dispatch-Response-To (docs/protocol.md, Responses) is
// streamed: one chunk per output token (a decode step makes one token per
// sequence, so this is also one chunk per decode step), written when the
// timing model says the token comes out (engine_hooks.go, tokenAt), then the
// end marker with the usage (prompt tokens: Dispatch-ISL-Tokens; cached: the
// prefix cache's, or Dispatch-Cached-Tokens' share of the cost) and a
// confirmed acknowledgement, on the ack goroutines. The mock admits the
// request to its engine when it accepts it and claims in parallel: a real
// engine must claim before it spends work, the simulation spends none, and
// tokens produced before the claim's answer are written when it comes. A
// body with Dispatch-Api gets OpenAI's shapes (openai.go): chat.completion.chunk
// or text_completion objects per token, the usage chunk with
// stream_options.include_usage, or one chat.completion or text_completion
// object without stream; its output length is Dispatch-Output-Tokens, else
// max_tokens (max_completion_tokens for chat), at most 2^20.
//
// When the helper ends a request on its own (the producer's cancel, the
// dispatcher's cancellation, nobody listening, taken, Stop), the worker's
// Cancelled takes the job out of the engine at once (its slot goes to the
// next waiting request) and publishes a completion record with status
// cancelled and the tokens computed so far (none for taken: the execution
// that took it over reports it).
//
// With Config.Preempt (-preempt) the worker declares preemption support:
// a job preempted before its first response chunk leaves the engine the
// same way, its request handed back (docs/protocol.md, Preemption).
//
// Time is simulated by events: when the simulator runs late, a slot freed at
// time t starts its next request at t, not at the late wake-up, so the
// simulated schedule does not drift.
//
// # Structure
//
// The simulation core (engine) is a plain state machine with time passed in;
// [Worker] owns one, a worker helper, one goroutine that wakes at the next
// event and, while the ends of responses are pending, up to 8 goroutines
// that end them in finishing order (the end marker waits for the producer's
// answer). With RefuseWhenFull
// > 0 a request that would make a rank's waiting queue longer than
// RefuseWhenFull is refused busy; by default every request is accepted and
// waits inside.
//
// A Worker is safe for concurrent use.
package mockworker
