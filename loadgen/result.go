package loadgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"fairdispatch/wire"
)

// Completion is one request's first completion record, as published by a worker
// on <prefix>.done.<worker_id>, with the publication time added.
type Completion struct {
	// RequestID is the request's Nats-Msg-Id.
	RequestID string `json:"request_id"`
	// Class is the class the request was published to.
	Class string `json:"class"`
	// Key is the fairness key loadgen sent (Config.Tenants); "" when none.
	Key string `json:"fairness_key,omitempty"`
	// Tenant is the request's tenant: Key, or a replay's tenant even when
	// it was not sent (Replay.SendKeys false).
	Tenant string `json:"tenant,omitempty"`
	// PhysicalClass is the class named by the completion record (Dispatch-Class).
	PhysicalClass string `json:"physical_class"`
	// WorkerID and DPRank name where it ran.
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
	// Seq is the worker's dispatch sequence number of the request.
	Seq uint64 `json:"seq"`
	// QueuedMs is the dispatcher's queueing time, in ms.
	QueuedMs uint64 `json:"queued_ms"`
	// PublishedAt is when loadgen published it; the rest come from the
	// record (timings a worker may add; docs/protocol.md, Completion
	// records), FinishedAt when loadgen received the record if the record
	// has none.
	PublishedAt  time.Time `json:"published_at"`
	ReceivedAt   time.Time `json:"received_at"`
	StartedAt    time.Time `json:"started_at"`
	FirstTokenAt time.Time `json:"first_token_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at"`
	// Latency is FinishedAt - PublishedAt, and TTFT FirstTokenAt -
	// PublishedAt (0 when the worker did not say).
	Latency time.Duration `json:"latency"`
	TTFT    time.Duration `json:"ttft,omitempty"`
	// PrefillTokens and OutputTokens are the record's: the uncached prompt
	// tokens computed and the tokens generated.
	PrefillTokens uint64 `json:"prefill_tokens"`
	OutputTokens  uint64 `json:"output_tokens"`
	// PromptTokens is the request's Dispatch-ISL-Tokens, and CachedTokens
	// the prompt tokens the worker found in its prefix cache (the record's
	// cached_tokens; 0 from workers without one).
	PromptTokens uint64 `json:"prompt_tokens"`
	CachedTokens uint64 `json:"cached_tokens"`
	// Status is the record's: how the request ended, "" (ok), "failed" or
	// "cancelled" (an engine worker's record for a request its engine
	// refused is failed).
	Status string `json:"status,omitempty"`
}

// Outcome is an outcome published on Dispatch-Reply-To (docs/protocol.md,
// Outcomes; wire.Outcome defines its fields), with the class loadgen published
// the request to.
type Outcome struct {
	wire.Outcome
	// Class is the class the request was published to (set by loadgen).
	Class string `json:"class"`
}

// ClassStats summarises one class.
type ClassStats struct {
	// Published counts requests whose publication JetStream acknowledged.
	Published int `json:"published"`
	// Dispatched counts "dispatched" outcomes received. Once every request
	// ended, Run waits up to Config.OutcomeWait for the outcome of each
	// completed request still missing one (it travels on another subject
	// than the worker's record and can come after it).
	Dispatched int `json:"dispatched"`
	// Completed counts requests completed.
	Completed int `json:"completed"`
	// Rejected counts requests rejected.
	Rejected int `json:"rejected"`
	// Errors counts rejections by error code.
	Errors map[string]int `json:"errors,omitempty"`
	// P50, P90 and P99 are latency percentiles (nearest rank) of completions.
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	// Throughput is completions per second over the run.
	Throughput float64 `json:"throughput"`
}

// Result is what a run observed.
type Result struct {
	// RunID prefixes every request id of the run.
	RunID string
	// Classes are the class names in configuration order.
	Classes []string
	// Requests is the number of requests the workload describes.
	Requests int
	// Published counts publications acknowledged by JetStream.
	Published int
	// PublishFailed counts requests whose publication failed for good; they
	// count as ended.
	PublishFailed int
	// Refused counts publication attempts JetStream refused for want of
	// room, by reason (wire.RefusalMaxBytes, wire.RefusalInsufficientResources...;
	// docs/protocol.md, When a stream or the store is full). Each was
	// retried with the same Nats-Msg-Id: a request refused three times and
	// then stored counts 3 here and 1 in Published.
	Refused map[string]int
	// Completions are the first completion record of each request, in arrival order.
	Completions []Completion
	// Rejected are the rejected outcomes, in arrival order.
	Rejected []Outcome
	// Duplicates counts completion records for requests already ended
	// (at-least-once processing).
	Duplicates int
	// PerClass summarises each class.
	PerClass map[string]ClassStats
	// KeyRequests counts the requests published under each fairness key
	// (Config.Tenants); nil without tenants.
	KeyRequests map[string]int
	// Elapsed runs from the first publication to the last request's end (or
	// the timeout).
	Elapsed time.Duration
	// Throughput is completions per second over Elapsed.
	Throughput float64
	// P50, P90 and P99 are latency percentiles over all completions.
	P50, P90, P99 time.Duration
	// Complete is true when every request completed, was rejected or failed to publish.
	Complete bool
	// CacheHitRate is the completions' cached tokens over their prompt
	// tokens: the fleet's prefix cache hit rate as the workers measured it.
	CacheHitRate float64
}

// PrefixShare returns how many of the first k completions came from each class
// (every configured class is present, possibly with 0).
func (r *Result) PrefixShare(k int) map[string]int {
	out := make(map[string]int, len(r.Classes))
	for _, c := range r.Classes {
		out[c] = 0
	}
	for _, c := range r.Completions[:min(k, len(r.Completions))] {
		out[c.Class]++
	}
	return out
}

// KeyShareBacklogged returns how many completions each fairness key got over
// the completions made while every key still had a published request to
// complete (up to and including the one that completes the first key's last),
// and how many completions that is: the split fairness keys decide, as the
// keys' backlogs allow (docs/design.md, Fairness keys).
func (r *Result) KeyShareBacklogged() (map[string]int, int) {
	left := make(map[string]int, len(r.KeyRequests))
	for k, n := range r.KeyRequests {
		left[k] = n
	}
	out := map[string]int{}
	n := 0
	for _, c := range r.Completions {
		if c.Key == "" {
			continue
		}
		out[c.Key]++
		n++
		if left[c.Key]--; left[c.Key] == 0 {
			break
		}
	}
	return out, n
}

// percentiles returns the nearest-rank p50, p90 and p99 of ds (sorted in place).
func percentiles(ds []time.Duration) (p50, p90, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return at(0.50), at(0.90), at(0.99)
}

// Summary is the printable digest of a Result.
type Summary struct {
	RunID         string         `json:"run_id"`
	Requests      int            `json:"requests"`
	Published     int            `json:"published"`
	PublishFailed int            `json:"publish_failed"`
	Refused       map[string]int `json:"publish_refused_by_reason,omitempty"`
	Completed     int            `json:"completed"`
	// NotOK counts the completions whose record says failed or cancelled.
	NotOK        int            `json:"completed_not_ok"`
	Rejected     int            `json:"rejected"`
	Duplicates   int            `json:"duplicates"`
	Complete     bool           `json:"complete"`
	ElapsedMs    float64        `json:"elapsed_ms"`
	Throughput   float64        `json:"throughput"`
	P50Ms        float64        `json:"p50_ms"`
	P90Ms        float64        `json:"p90_ms"`
	P99Ms        float64        `json:"p99_ms"`
	Classes      []ClassSummary `json:"classes"`
	PrefixK      int            `json:"prefix_k"`
	PrefixShare  map[string]int `json:"prefix_share"`
	RejectedBy   map[string]int `json:"rejected_by_error,omitempty"`
	CacheHitRate float64        `json:"cache_hit_rate,omitempty"`
	PerWorker    map[string]int `json:"completions_per_worker,omitempty"`
	// TTFTP50Ms and TTFTP99Ms are the time to first token's percentiles,
	// when the workers' records carry first_token_at.
	TTFTP50Ms float64 `json:"ttft_p50_ms,omitempty"`
	TTFTP99Ms float64 `json:"ttft_p99_ms,omitempty"`
}

// ClassSummary is one class of a Summary.
type ClassSummary struct {
	Class      string         `json:"class"`
	Published  int            `json:"published"`
	Dispatched int            `json:"dispatched"`
	Completed  int            `json:"completed"`
	Rejected   int            `json:"rejected"`
	Errors     map[string]int `json:"errors,omitempty"`
	Throughput float64        `json:"throughput"`
	P50Ms      float64        `json:"p50_ms"`
	P90Ms      float64        `json:"p90_ms"`
	P99Ms      float64        `json:"p99_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summarize digests r. The prefix share is over the first K completions, K the
// request count of the first class.
func (r *Result) Summarize(firstClassCount int) Summary {
	s := Summary{
		RunID: r.RunID, Requests: r.Requests, Published: r.Published, PublishFailed: r.PublishFailed, Refused: r.Refused,
		Completed: len(r.Completions), Rejected: len(r.Rejected), Duplicates: r.Duplicates,
		Complete: r.Complete, ElapsedMs: ms(r.Elapsed), Throughput: r.Throughput,
		P50Ms: ms(r.P50), P90Ms: ms(r.P90), P99Ms: ms(r.P99),
		PrefixK: firstClassCount, PrefixShare: r.PrefixShare(firstClassCount),
		CacheHitRate: r.CacheHitRate,
	}
	if r.CacheHitRate > 0 {
		s.PerWorker = map[string]int{}
		for _, c := range r.Completions {
			s.PerWorker[c.WorkerID]++
		}
	}
	var ttft []time.Duration
	for _, c := range r.Completions {
		if c.Status != "" && c.Status != wire.StatusOK {
			s.NotOK++
		}
		if c.TTFT > 0 {
			ttft = append(ttft, c.TTFT)
		}
	}
	if len(ttft) > 0 {
		p50, _, p99 := percentiles(ttft)
		s.TTFTP50Ms, s.TTFTP99Ms = ms(p50), ms(p99)
	}
	for _, c := range r.Classes {
		st := r.PerClass[c]
		s.Classes = append(s.Classes, ClassSummary{Class: c, Published: st.Published, Dispatched: st.Dispatched,
			Completed: st.Completed, Rejected: st.Rejected, Errors: st.Errors, Throughput: st.Throughput,
			P50Ms: ms(st.P50), P90Ms: ms(st.P90), P99Ms: ms(st.P99)})
	}
	for _, o := range r.Rejected {
		if s.RejectedBy == nil {
			s.RejectedBy = map[string]int{}
		}
		s.RejectedBy[o.Error]++
	}
	return s
}

// String renders the summary as a human-readable table.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %d requests, %d published, %d completed, %d rejected, %d publish failures, %d duplicates",
		s.RunID, s.Requests, s.Published, s.Completed, s.Rejected, s.PublishFailed, s.Duplicates)
	if !s.Complete {
		b.WriteString(" (INCOMPLETE)")
	}
	if s.NotOK > 0 {
		fmt.Fprintf(&b, "\n%d of the completions ended failed or cancelled (their workers' records say so)", s.NotOK)
	}
	fmt.Fprintf(&b, "\nelapsed %.1f ms, throughput %.1f req/s, latency p50 %.1f ms p90 %.1f ms p99 %.1f ms\n",
		s.ElapsedMs, s.Throughput, s.P50Ms, s.P90Ms, s.P99Ms)
	fmt.Fprintf(&b, "%-16s %9s %10s %9s %8s %10s %9s %9s %9s\n", "class", "published", "dispatched", "completed", "rejected", "req/s", "p50 ms", "p90 ms", "p99 ms")
	for _, c := range s.Classes {
		fmt.Fprintf(&b, "%-16s %9d %10d %9d %8d %10.1f %9.1f %9.1f %9.1f\n", c.Class, c.Published, c.Dispatched,
			c.Completed, c.Rejected, c.Throughput, c.P50Ms, c.P90Ms, c.P99Ms)
	}
	for _, k := range slices.Sorted(maps.Keys(s.RejectedBy)) {
		fmt.Fprintf(&b, "rejected %s: %d\n", k, s.RejectedBy[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Refused)) {
		fmt.Fprintf(&b, "publish refused by JetStream (%s): %d, retried\n", k, s.Refused[k])
	}
	if s.TTFTP50Ms > 0 {
		fmt.Fprintf(&b, "time to first token p50 %.1f ms p99 %.1f ms\n", s.TTFTP50Ms, s.TTFTP99Ms)
	}
	if s.CacheHitRate > 0 {
		fmt.Fprintf(&b, "prefix cache hit rate %.3f; completions per worker:", s.CacheHitRate)
		for _, w := range slices.Sorted(maps.Keys(s.PerWorker)) {
			fmt.Fprintf(&b, " %s %d", w, s.PerWorker[w])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "first %d completions:", s.PrefixK)
	for _, c := range s.Classes {
		fmt.Fprintf(&b, " %s %d", c.Class, s.PrefixShare[c.Class])
	}
	b.WriteString("\n")
	return b.String()
}
