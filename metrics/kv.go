package metrics

import "github.com/prometheus/client_golang/prometheus"

// KV holds the collectors of the KV cache index (docs/protocol.md, KV cache
// events), built by NewKV only when the dispatcher keeps the index. A nil *KV
// counts nothing, so callers need not check.
//
//	name                                          type       labels
//	fairdispatch_kv_events_total                  counter    result (applied, duplicate, dropped)
//	fairdispatch_kv_block_operations_total        counter    (stored and removed hashes applied)
//	fairdispatch_kv_event_lag_seconds             histogram  (publication to application)
//	fairdispatch_kv_index_blocks                  gauge      tier ((rank, block) pairs)
//	fairdispatch_kv_stale_ranks                   gauge
//	fairdispatch_kv_prompt_blocks_total           counter    (blocks of the dispatches scored by the index)
//	fairdispatch_kv_overlap_blocks_total          counter    (of which the chosen rank held, as a prefix)
type KV struct {
	applied, duplicate, dropped prometheus.Counter
	blockOps                    prometheus.Counter
	lag                         prometheus.Observer
	blocks                      *prometheus.GaugeVec
	stale                       prometheus.Gauge
	promptBlocks, overlapBlocks prometheus.Counter
}

// KVLagBuckets are the buckets of fairdispatch_kv_event_lag_seconds: 1 ms to
// about 65 s.
var KVLagBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

// NewKV builds the KV index collectors and registers them on reg (nil: none).
// tiers are the tier names, each a label value of fairdispatch_kv_index_blocks
// from the start.
func NewKV(reg prometheus.Registerer, tiers []string) *KV {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "kv_events_total",
		Help: "KV cache events read from the stream, per result: applied, duplicate (event_id already seen), dropped (invalid, or the actor's queue full)."}, []string{"result"})
	k := &KV{
		applied:   events.WithLabelValues("applied"),
		duplicate: events.WithLabelValues("duplicate"),
		dropped:   events.WithLabelValues("dropped"),
		blockOps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "kv_block_operations_total",
			Help: "Stored and removed block hashes in the KV cache events applied."}),
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "kv_index_blocks",
			Help: "(rank, block) pairs in the KV cache index, per tier."}, []string{"tier"}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "kv_stale_ranks",
			Help: "Worker ranks whose KV index is stale (overlap 0) until they resynchronise."}),
		promptBlocks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "kv_prompt_blocks_total",
			Help: "Blocks (Dispatch-Block-Hashes) of the dispatches scored by the KV cache index."}),
		overlapBlocks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "kv_overlap_blocks_total",
			Help: "Blocks of those dispatches that the chosen rank held (its overlap, in blocks): over kv_prompt_blocks_total, the overlap hit rate."}),
	}
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "kv_event_lag_seconds",
		Help: "Time from a KV cache event's publication to its application to the index.", Buckets: KVLagBuckets})
	k.lag = lag
	for _, t := range tiers {
		k.blocks.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(events, k.blockOps, lag, k.blocks, k.stale, k.promptBlocks, k.overlapBlocks)
	}
	return k
}

// Event counts one event read: applied (with its block operations and its lag
// in seconds), a duplicate, or dropped.
func (k *KV) Event(result string, blockOps int, lagSeconds float64) {
	if k == nil {
		return
	}
	switch result {
	case "applied":
		k.applied.Inc()
		k.blockOps.Add(float64(blockOps))
		if lagSeconds >= 0 {
			k.lag.Observe(lagSeconds)
		}
	case "duplicate":
		k.duplicate.Inc()
	default:
		k.dropped.Inc()
	}
}

// SetIndex records the index's size: (rank, block) pairs per tier, in the
// order of the tiers given to NewKV, and the stale ranks.
func (k *KV) SetIndex(tiers []string, blocks []int, stale int) {
	if k == nil {
		return
	}
	for i, t := range tiers {
		k.blocks.WithLabelValues(t).Set(float64(blocks[i]))
	}
	k.stale.Set(float64(stale))
}

// Dispatch counts one dispatch scored by the index: its prompt blocks and
// the chosen rank's overlap in blocks.
func (k *KV) Dispatch(promptBlocks, overlapBlocks int) {
	if k == nil {
		return
	}
	k.promptBlocks.Add(float64(promptBlocks))
	k.overlapBlocks.Add(float64(overlapBlocks))
}
