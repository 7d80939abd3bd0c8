package worker

import (
	"encoding/json"
	"fmt"
	"slices"
)

// RankLoad is the load of one data-parallel rank (docs/protocol.md, Load report).
type RankLoad struct {
	// ActivePrefillTokens counts the uncached tokens of every request received
	// and not yet finished prefilling, including those waiting inside the worker.
	ActivePrefillTokens uint64
	// ActiveDecodeBlocks counts the KV blocks of requests decoding.
	ActiveDecodeBlocks uint64
	// KVUsedBlocks counts the KV blocks in use.
	KVUsedBlocks uint64
	// ActiveRequests counts requests received and not finished.
	ActiveRequests uint64
}

// Report is the JSON load report of docs/protocol.md, Load report, as published on <prefix>.load.<id>.
type Report struct {
	WorkerID            string       `json:"worker_id"`
	DPStart             int          `json:"data_parallel_start_rank"`
	DPSize              int          `json:"data_parallel_size"`
	MaxNumBatchedTokens uint64       `json:"max_num_batched_tokens,omitempty"`
	TotalKVBlocks       uint64       `json:"total_kv_blocks"`
	MaxActiveRequests   uint64       `json:"max_active_requests,omitempty"`
	Taints              []string     `json:"taints"`
	Draining            bool         `json:"draining"`
	TTLMs               int64        `json:"ttl_ms"`
	Instance            string       `json:"instance"`
	SeenSeq             uint64       `json:"seen_seq"`
	Ranks               []RankReport `json:"ranks"`
}

// RankReport is one entry of Report.Ranks.
type RankReport struct {
	DPRank              int    `json:"dp_rank"`
	ActivePrefillTokens uint64 `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  uint64 `json:"active_decode_blocks"`
	KVUsedBlocks        uint64 `json:"kv_used_blocks"`
	ActiveRequests      uint64 `json:"active_requests"`
}

// SetLoad sets the load of rank, an absolute rank in [DPStart, DPStart+DPSize).
// A change schedules a report; setting the same load again does nothing.
// An Offer that accepts must call SetLoad with the request counted before it
// returns (see the package documentation on seen_seq).
func (w *Worker) SetLoad(rank int, l RankLoad) error {
	i := rank - w.cfg.DPStart
	if i < 0 || i >= w.cfg.DPSize {
		return fmt.Errorf("worker: set load: rank %d outside [%d, %d)", rank, w.cfg.DPStart, w.cfg.DPStart+w.cfg.DPSize)
	}
	w.mu.Lock()
	changed := w.ranks[i] != l
	w.ranks[i] = l
	w.mu.Unlock()
	if changed {
		w.kickReport()
	}
	return nil
}

// SetDraining sets the draining flag of the reports: a draining worker stays
// live but the dispatcher sends it nothing new.
func (w *Worker) SetDraining(draining bool) {
	w.mu.Lock()
	changed := w.draining != draining
	w.draining = draining
	w.mu.Unlock()
	if changed {
		w.kickReport()
	}
}

// SeenSeq returns the seen_seq the next report will carry.
func (w *Worker) SeenSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seenSeq
}

// Instance returns the random instance id chosen at New.
func (w *Worker) Instance() string { return w.instance }

// kickReport asks the report loop for a report, coalescing with pending asks.
func (w *Worker) kickReport() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// snapshot builds the current report; ok is false while an Offer is in
// progress, whose end kicks another report.
func (w *Worker) snapshot() (rep Report, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.offering {
		return rep, false
	}
	rep = Report{
		WorkerID:            w.cfg.ID,
		DPStart:             w.cfg.DPStart,
		DPSize:              w.cfg.DPSize,
		MaxNumBatchedTokens: w.cfg.MaxNumBatchedTokens,
		TotalKVBlocks:       w.cfg.TotalKVBlocks,
		MaxActiveRequests:   w.cfg.MaxActiveRequests,
		Taints:              w.taints,
		Draining:            w.draining,
		TTLMs:               w.cfg.TTL.Milliseconds(),
		Instance:            w.instance,
		SeenSeq:             w.seenSeq,
		Ranks:               make([]RankReport, len(w.ranks)),
	}
	for i, l := range w.ranks {
		rep.Ranks[i] = RankReport{
			DPRank:              w.cfg.DPStart + i,
			ActivePrefillTokens: l.ActivePrefillTokens,
			ActiveDecodeBlocks:  l.ActiveDecodeBlocks,
			KVUsedBlocks:        l.KVUsedBlocks,
			ActiveRequests:      l.ActiveRequests,
		}
	}
	return rep, true
}

// publishReport publishes the current report unless an Offer is in progress.
func (w *Worker) publishReport() (bool, error) {
	rep, ok := w.snapshot()
	if !ok {
		return false, nil
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return false, fmt.Errorf("worker: encode report: %w", err)
	}
	if err := w.nc.Publish(w.loadSubj, b); err != nil {
		return false, fmt.Errorf("worker: publish report to %s: %w", w.loadSubj, err)
	}
	w.mu.Lock()
	w.published = publishedState{ranks: append(w.published.ranks[:0], w.ranks...), draining: rep.Draining, seen: rep.SeenSeq, valid: true}
	w.mu.Unlock()
	return true, nil
}

// publishedState is what the last published report said.
type publishedState struct {
	ranks    []RankLoad
	draining bool
	seen     uint64
	valid    bool
}

// onlySeenMoved reports whether the only change since the last published
// report is seen_seq: then the report may wait (Config.SeenOnlyInterval).
func (w *Worker) onlySeenMoved() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := &w.published
	return p.valid && !w.offering && p.draining == w.draining && slices.Equal(p.ranks, w.ranks) && p.seen != w.seenSeq
}
