package workerkit

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// Defaults applied by [New] to zero fields of [Config].
const (
	// DefaultPrefix is the subject prefix shared by every fairdispatch subject, naming.DefaultPrefix.
	DefaultPrefix = naming.DefaultPrefix
	// DefaultTTL is the report TTL: the dispatcher fences a worker silent this long.
	DefaultTTL = 3 * time.Second
	// DefaultAckWait is the request stream's default ack wait (docs/config.md, Flags and environment).
	DefaultAckWait = 30 * time.Second
	// DefaultMinReportInterval is the shortest gap between two load reports
	// but for those freeing capacity, which go at once.
	DefaultMinReportInterval = 2 * time.Millisecond
	// DefaultSeenOnlyInterval is how long a report whose only news is seen_seq may wait.
	DefaultSeenOnlyInterval = 20 * time.Millisecond
	// DefaultFirstProgressDelay is how soon after acceptance the first +WPI goes out.
	DefaultFirstProgressDelay = 5 * time.Millisecond
)

// Bounds of [Config] fields, from docs/protocol.md; docs/protocol.md, Load report.
const (
	// MinTTL is the smallest TTL a report may carry.
	MinTTL = 100 * time.Millisecond
	// MaxTTL is the largest TTL a report may carry.
	MaxTTL = 600 * time.Second
	// MaxRank is the largest data-parallel rank.
	MaxRank = 65535
	// maxActiveRequests bounds MaxActiveRequests (the dispatcher's bound).
	maxActiveRequests = 1_000_000
)

// ErrConfig is wrapped by every configuration error of [New].
var ErrConfig = errors.New("worker: invalid config")

// Config describes one worker.
type Config struct {
	// ID is the worker id: a subject token [A-Za-z0-9_-]+, at most 128 bytes. Required.
	ID string
	// Prefix is the subject prefix; default "dispatch". The dispatcher's
	// --subject-prefix: dot-separated tokens of [A-Za-z0-9_-] (package naming).
	Prefix string
	// DPStart is the first data-parallel rank of the worker, 0 to 65535.
	DPStart int
	// DPSize is the number of data-parallel ranks, default 1; DPStart+DPSize-1 <= 65535.
	DPSize int
	// MaxNumBatchedTokens is the engine's batch budget in tokens; 0 means unknown
	// and omits the field from reports.
	MaxNumBatchedTokens uint64
	// TotalKVBlocks is the number of KV cache blocks per rank; 0 turns the
	// dispatcher's decode latch off for this worker.
	TotalKVBlocks uint64
	// MaxActiveRequests is the capacity of each rank in requests (for an
	// engine, its max_num_seqs), 0 to 1,000,000; 0 omits the field from reports
	// (no capacity). A rank whose reported active_requests plus the dispatches
	// not yet counted reach it receives nothing until one finishes, so the
	// worker need not refuse for capacity (docs/protocol.md, Load report).
	MaxActiveRequests uint64
	// Taints are the worker's taints, at most wire.MaxTaints of them, each
	// [A-Za-z0-9_.:/-]+ and at most 128 bytes.
	Taints []string
	// TTL is the report TTL, 100ms to 600s, default 3s. Reports go out at least every TTL/3.
	TTL time.Duration
	// AckWait is the fallback ack wait, default 30s, for dispatches without
	// Dispatch-Ack-Wait-Ms (from a dispatcher older than that header): held
	// requests get +WPI every third of the ack wait their dispatch carried,
	// else every AckWait/3. Must be at least 3ms.
	AckWait time.Duration
	// MinReportInterval is the shortest gap between two load reports (the
	// coalescing window), default 2ms, at most TTL/3. A report freeing
	// capacity does not wait for it.
	MinReportInterval time.Duration
	// SeenOnlyInterval is the coalescing window of a report whose only change
	// since the last one is seen_seq (the load and draining flag are the same),
	// default 20ms, at least MinReportInterval and at most TTL/3. The dispatcher
	// counts those dispatches through its bookings meanwhile, so nothing is
	// lost by waiting; it spares one report per dispatch at high rates.
	SeenOnlyInterval time.Duration
	// FirstProgressDelay is how soon after acceptance the first +WPI is sent,
	// default 5ms, at most AckWait/3. A request finished sooner needs none,
	// which spares JetStream one operation per short request.
	FirstProgressDelay time.Duration
	// HeaderForm asks the dispatcher for dispatches in the header form
	// instead of the compact form (docs/protocol.md, Compact dispatch form).
	// The compact form costs the dispatcher and the worker less CPU per
	// request; Request holds the same fields either way, except that in the
	// compact form Request.Header holds the producer's headers only, not the
	// eight Dispatch-* headers the dispatcher sets. Set it for a handler
	// that reads those from Request.Header. A compact frame is decoded
	// either way: a dispatch sent before the dispatcher read this process's
	// first report uses the form asked for by the process before it. Such a
	// request's Request.Header lacks the dispatcher's headers (Request.Compact
	// is set); its fields hold them as always.
	HeaderForm bool
	// Preempt declares in the load reports that the worker hands back a
	// request the dispatcher preempts (docs/protocol.md, Preemption): on a
	// cancellation with reason preempt, the helper hands the request back
	// (-NAK, no end marker, no completion record expected) if no response
	// chunk was written, and ends its context with ErrPreempted; after a
	// chunk it ignores the ask and the request runs to its end. Without it a
	// preempt is never sent, and one received is ignored.
	Preempt bool
	// PlainAcks publishes acknowledgements (+ACK, +TERM, -NAK) as plain core
	// NATS messages instead of confirmed ones (docs/protocol.md, After
	// accepting). It is for a worker whose NATS user may not subscribe to its
	// connection's inbox (docs/protocol.md, Permissions a worker needs),
	// which confirmed acknowledgements need. The cost: an acknowledgement
	// published around a NATS server restart or a reconnection can be lost;
	// its request is then dispatched again once its ack wait runs out, and
	// runs again unless it comes back to this worker within FinishedWindow
	// (docs/decisions.md, Confirmed acknowledgements). Confirmed ones cost a
	// little more CPU per request (docs/bench.md, Confirmed acknowledgements).
	PlainAcks bool
}

// withDefaults returns c with defaults applied and validated.
func (c Config) withDefaults() (Config, error) {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.DPSize = cmp.Or(c.DPSize, 1)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.AckWait = cmp.Or(c.AckWait, DefaultAckWait)
	c.MinReportInterval = cmp.Or(c.MinReportInterval, DefaultMinReportInterval)
	c.SeenOnlyInterval = cmp.Or(c.SeenOnlyInterval, max(DefaultSeenOnlyInterval, c.MinReportInterval))
	c.FirstProgressDelay = cmp.Or(c.FirstProgressDelay, DefaultFirstProgressDelay)
	var errs []error
	if !wire.ValidToken(c.ID) {
		errs = append(errs, fmt.Errorf("id %q: want [A-Za-z0-9_-]+, at most 128 bytes", c.ID))
	}
	if _, err := naming.New(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if c.DPStart < 0 || c.DPSize < 1 || c.DPStart+c.DPSize-1 > MaxRank {
		errs = append(errs, fmt.Errorf("ranks [%d, %d): want 0 <= start, size >= 1, last rank <= %d",
			c.DPStart, c.DPStart+c.DPSize, MaxRank))
	}
	if c.MaxActiveRequests > maxActiveRequests {
		errs = append(errs, fmt.Errorf("max active requests %d: want 0 to %d", c.MaxActiveRequests, maxActiveRequests))
	}
	if len(c.Taints) > wire.MaxTaints {
		// The dispatcher would drop every report: the worker would never be live.
		errs = append(errs, fmt.Errorf("%d taints: want at most %d", len(c.Taints), wire.MaxTaints))
	}
	for _, t := range c.Taints {
		if !wire.ValidTaint(t) {
			errs = append(errs, fmt.Errorf("taint %q: want [A-Za-z0-9_.:/-]+, at most 128 bytes", t))
		}
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		errs = append(errs, fmt.Errorf("ttl %v: want %v to %v", c.TTL, MinTTL, MaxTTL))
	}
	if c.AckWait < 3*time.Millisecond {
		errs = append(errs, fmt.Errorf("ack wait %v: want at least 3ms", c.AckWait))
	}
	if c.SeenOnlyInterval < c.MinReportInterval || c.SeenOnlyInterval > c.TTL/3 {
		errs = append(errs, fmt.Errorf("seen-only interval %v: want min report interval to ttl/3", c.SeenOnlyInterval))
	}
	if c.FirstProgressDelay < 0 || c.FirstProgressDelay > c.AckWait/3 {
		errs = append(errs, fmt.Errorf("first progress delay %v: want 0 to ack wait/3", c.FirstProgressDelay))
	}
	if c.MinReportInterval < 0 || c.MinReportInterval > c.TTL/3 {
		errs = append(errs, fmt.Errorf("min report interval %v: want 0 to ttl/3", c.MinReportInterval))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return c, nil
}
