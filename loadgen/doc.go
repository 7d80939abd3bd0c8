// Package loadgen publishes a described workload of requests to the dispatcher's
// request stream and follows what becomes of them, so that cmd/loadgen and
// end-to-end tests share one implementation.
//
// [Run] makes sure the request stream exists, creating it with subjects
// <prefix>.req.*, work-queue retention and file storage when missing (its
// name is the dispatcher's, from package naming: DISPATCH_REQ for the default
// prefix, <Q>_REQ for another),
// subscribes to completion records on <prefix>.done.* and to outcomes on a
// fresh inbox named in every request's Dispatch-Reply-To, then publishes the
// requests asynchronously with at most Window publications awaiting their
// JetStream acknowledgement. Every request carries Nats-Msg-Id = <run id>-<n>,
// so a publication retried after a lost acknowledgement is stored once.
// A publication JetStream refuses for want of room (the request stream at its
// limit, the store full: docs/protocol.md, When a stream or the store is
// full) is retried with backoff, 50 ms doubling to 2 s, until it is stored or
// the run ends, and counted by reason in [Result.Refused]; any other failure
// is retried at once, five times, then counted in Result.PublishFailed.
//
// A request ends when its first completion record arrives (a [Completion]) or a
// rejected outcome (docs/protocol.md, Outcomes) arrives for it (an [Outcome]). Run returns when every
// request has ended, or with [ErrIncomplete] when ctx ends or Config.Timeout
// passes first; the [Result] is returned in both cases.
//
// The key output for fairness checks is [Result.Completions] in arrival order
// and [Result.PrefixShare]: how many of the first K completions each class got.
// Requests are attributed to the class they were published to (the subject
// token), whatever physical class the dispatcher resolved; the completion
// record's class is kept as PhysicalClass.
//
// Latency is measured from just before publication to the completion record's
// finished_at, so it assumes the worker's clock agrees with this process's
// (true in-process and on one machine).
//
// With Config.Prefixes every request's prompt is one of shared prefixes
// (Zipf-distributed) plus blocks of its own, sent as Dispatch-Block-Hashes
// ([Prefixes]); [Result.CacheHitRate] is the fleet's prefix cache hit rate
// from the workers' completion records (cached_tokens).
//
// With Config.Replay it replays a trace in the Mooncake format (trace.go:
// ReadTrace, PrepareReplay) instead: each record is one request published at
// its timestamp over Replay.Speedup, with its ISL, Dispatch-Output-Tokens,
// and Dispatch-Block-Hashes chained over token ids derived from its hash ids
// (TraceTokens: two records sharing their first k hash ids share exactly
// their first k × 512 tokens), its conversation's tenant (TenantOf) and one
// class. Completions then carry the record's first_token_at (TTFT), prefill
// and output tokens, and the tenant even when it was not sent.
//
// Run is safe to call concurrently with different configurations; a Result is
// immutable once returned.
package loadgen
