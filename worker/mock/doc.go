// Package mock is an engine simulator built on the worker helper: a stand-in for
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
// worker sends +ACK and publishes a [Completion] on <prefix>.done.<worker_id>.
//
// The uncached tokens of a request are its Dispatch-Cost when present (so the
// reported load equals what the dispatcher booked), else Dispatch-ISL-Tokens
// minus Dispatch-Cached-Tokens, clamped at 0.
//
// The load of a rank (SPEC 1.3): active_prefill_tokens sums the uncached tokens
// of requests waiting or prefilling; active_requests counts requests received
// and not finished; kv_used_blocks sums ceil((isl + output)/BlockSize) over
// running requests and active_decode_blocks the same over decoding ones.
//
// Time is simulated by events: when the simulator runs late, a slot freed at
// time t starts its next request at t, not at the late wake-up, so the
// simulated schedule does not drift.
//
// # Structure
//
// The simulation core (engine) is a plain state machine with time passed in;
// [Worker] owns one, a worker helper and one goroutine that wakes at the next
// event. With RefuseWhenFull > 0 a request that would make a rank's waiting
// queue longer than RefuseWhenFull is refused busy; by default every request is
// accepted and waits inside.
//
// A Worker is safe for concurrent use.
package mock
