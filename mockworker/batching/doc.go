// Package batching is the engine model of the mock worker's trace replays: a
// continuously batched LLM engine with chunked prefill, a KV block pool that
// is also its prefix cache, and a step time taken from a published
// measurement of a named engine, model and accelerator. It is a pure state
// machine: time comes in as arguments, nothing runs on its own, and the
// mock worker (package mockworker, batched.go) drives it.
//
// # The step
//
// An engine runs steps one after the other while it has work. Each step
// (Engine's documentation gives the scheduling order) decodes one token for
// every decoding sequence and prefills chunks of the prompts being
// prefilled, within a budget of MaxBatchedTokens tokens, decodes first. It
// lasts
//
//	StepFloor + PrefillPerToken × W + DecodePerContextToken × C
//
// where W is the prefill work of its chunks (a chunk of n prompt tokens
// starting at position o counts n + (n·o + n(n−1)/2) / AttentionTokens: each
// token also attends to the tokens before it) and C is the context of its
// decoding sequences (prompt plus tokens generated so far, summed over them).
// So a request's first token comes at the end of the step that computes its
// last uncached prompt token; prefill chunks slow the decodes they share
// steps with; and decode steps slow as the batch and its contexts grow. A
// sequence in the prefix cache skips its cached blocks (at most ISL−1
// tokens: the last is always computed, as in vLLM).
//
// # The constants and their source
//
// [Llama70BH100] is fitted to NVIDIA's published benchmark of NIM for LLMs
// (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, "Llama-3.3-70b-
// instruct Results", NIM 1.8.0, 2 x H100 80G, fp8 TP2; measured with
// AIPerf, closed loop at a fixed concurrency):
//
//	input/output  concurrency  TTFT ms  ITL ms  output tokens/s
//	5000/500      1            406.77   18.58     51.67
//	5000/500      5            546.7    21.83    218.48
//	5000/500      25           688.69   38.75    623.4
//	5000/500      50           834.51   59.73    814.37
//	5000/500      100..250     7996..   92.9     ~920 (saturated)
//	500/2000      1             47.77   18.91     52.85
//
// From it:
//
//   - StepFloor = 18.58 ms: the ITL of a lone sequence (18.91 at context
//     500, 18.58 at 5000: no measurable context effect at batch 1).
//   - AttentionTokens = 53,864: from the model's architecture, not
//     measured: a token's linear layers cost 2 × 70.6e9 FLOPs, its attention
//     over each earlier token 4 × 8192 × 80 (QKᵀ and AV, hidden 8192, 80
//     layers); their ratio. It assumes attention runs at the efficiency of
//     the linear layers (FlashAttention on H100 comes close).
//   - PrefillPerToken = 74.2 µs: the TTFT of 5000 tokens at concurrency 1,
//     406.77 ms, is one step (within the budget) of work 5000 + 5000·4999/2
//     / 53,864 = 5232: (406.77 − 18.58) / 5232. About 13,500 prompt tokens
//     per second. The 500-token TTFT is then predicted at 55.9 ms (measured
//     47.77, +17%; short prompts are rare in the trace).
//   - DecodePerContextToken = 12.34 ns: least squares over the closed-loop
//     points at concurrency 5, 25 and 50. In a steady closed loop each
//     request is one prefill of 5000 tokens and 499 decode steps, so a step
//     carries on average P = (c/(TTFT + 499·ITL))·5000·ITL prompt tokens
//     (47.7, 241.9, 487.4) beside B = c·499·ITL/(TTFT + 499·ITL) decoding
//     sequences (4.76, 24.1, 48.6) of about 5250 tokens of context each.
//     The model then gives ITLs of 22.59, 38.92, 59.57 ms against 21.83,
//     38.75, 59.73 measured (+3.5%, +0.4%, −0.3%). Most of the growth of
//     ITL with concurrency is the prefill chunks sharing the steps; the KV
//     read adds 3 ms at 255,000 tokens of context. The data cannot tell a
//     per-sequence cost from a per-context-token one (every sequence had
//     about 5250 tokens); the model has none per sequence.
//   - KVBlocks = 470,000 tokens / 64: at saturation (concurrency 100 to
//     250) the engine decodes 920 tokens/s at an ITL of 92.9 ms, so 85.5
//     sequences run at once, and TTFT grows without bound: the rest wait
//     for KV memory. TensorRT-LLM's default scheduler (GUARANTEED_NO_EVICT)
//     admits a request only when its whole prompt and output fit: 85.5 ×
//     5500 = 470,000 tokens. (From the hardware: 2 × (80 − 35.3 GB of FP8
//     weights − activations) × 0.9 at 160 KiB a token gives 440,000 to
//     460,000.)
//   - MaxBatchedTokens = 8192 (TensorRT-LLM's default max_num_tokens: the
//     chunk budget of a step) and MaxSeqs = 256 (a common max_batch_size;
//     with the trace's long prompts KV memory binds long before it).
//   - BlockSize = 64 tokens (TensorRT-LLM's default tokens_per_block; a
//     512-token trace block is 8 of them). Not from the benchmark.
//
// What the model leaves out: CPU and network overheads beyond what the
// floor holds; preemption (none by construction); a host or disk tier of
// the cache (the pool is the device's only; TensorRT-LLM offloads to host
// memory only when configured to); the speed-up of prefill chunks that
// reuse a cached prefix beyond skipping it; speculative decoding.
//
// # The prefix cache
//
// The pool holds every block of the running sequences: hashed prompt blocks
// (shared by the sequences with the same prefix) and private ones (a
// prompt's partial last block, the output). When no running sequence holds
// a hashed block it stays in the pool as cache, least recently released
// first out when room is needed (LRU, a sequence's blocks released last
// first, so a prefix's tail goes before its head). A request's cached prefix
// is looked up when it is scheduled, not when it arrives, so a request that
// waited sees what arrived before it. The observer (the mock worker's KV
// cache events, docs/protocol.md, KV cache events) is told of blocks stored
// when a request is scheduled and of blocks evicted when they are.
//
// # Time compression
//
// Model.Speedup divides every duration, so that a trace replayed k times
// faster meets an engine k times faster and the system keeps its shape
// (queues, batch sizes, cache reuse) in 1/k of the time. What is not scaled
// (the NATS hops, timers, load-report coalescing) weighs k times more in the
// trace's time; cmd/bench reports it.
//
// # Concurrency
//
// Nothing here is safe for concurrent use; the mock worker calls it under
// its lock.
package batching
