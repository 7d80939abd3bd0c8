// Package sim is the policy dry-run of fairctl sim (docs/operations.md,
// Recording traffic and fairctl sim): it replays arrivals — recorded by a
// dispatcher (docs/protocol.md, Trace records) or generated — through the
// real pure core (package scheduler: Arrive, Report, Next, Tick) in virtual
// time, against a modelled fleet, and measures what each class and key got.
//
// The fleet model: every worker has Ranks data-parallel ranks; a rank
// prefills the requests it receives one at a time, in order, at Rate uncached
// tokens per second (its prefill throughput), then each request decodes for
// Decode (in parallel with the next prefill) and completes. After every change
// the worker reports its load as a real one does: per rank, the uncached
// tokens received and not yet prefilled (active_prefill_tokens) and the
// requests received and not completed (active_requests). A worker joins at
// its Join time. Routing headers (pins, allow-lists, taints, per-worker
// overlaps) and deadlines are not recorded, so not modelled.
//
// The package is pure and deterministic: no goroutines, clocks or I/O but
// the io.Reader of ReadTrace; the same inputs and seed give the same result.
package sim
