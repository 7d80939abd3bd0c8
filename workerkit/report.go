package workerkit

import (
	"encoding/json"
	"fmt"
	"slices"

	"fairdispatch/wire"
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

// Report is the load report of docs/protocol.md, Load report, as published on
// <prefix>.load.<id>. It marshals to and from wire.LoadReport, which holds
// the JSON field names.
type Report struct {
	WorkerID            string
	DPStart             int
	DPSize              int
	MaxNumBatchedTokens uint64 // 0 (unknown) is left out of the JSON
	TotalKVBlocks       uint64
	MaxActiveRequests   uint64 // 0 (no capacity) is left out of the JSON
	Taints              []string
	Draining            bool
	TTLMs               int64
	Instance            string
	SeenSeq             uint64
	Ranks               []RankReport
	// CompactDispatch is the compact dispatch form's version the worker
	// reads (wire.CompactDispatch), 0 (left out of the JSON) for the header
	// form only.
	CompactDispatch uint64
	// Preempt declares preemption support (Config.Preempt).
	Preempt bool
}

// RankReport is one entry of Report.Ranks.
type RankReport struct {
	DPRank              int
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  uint64
	KVUsedBlocks        uint64
	ActiveRequests      uint64
}

// Wire returns r as the wire record it is published as.
func (r Report) Wire() wire.LoadReport {
	id, start, size, ttl, seen := r.WorkerID, uint32(r.DPStart), uint32(r.DPSize), uint64(r.TTLMs), r.SeenSeq
	w := wire.LoadReport{
		WorkerID: &id, DPStart: &start, DPSize: &size, TotalKV: r.TotalKVBlocks, Taints: r.Taints,
		Draining: r.Draining, TTLms: &ttl, Instance: r.Instance, SeenSeq: &seen,
		Ranks: make([]wire.RankLoad, len(r.Ranks)), CompactDispatch: r.CompactDispatch, Preempt: r.Preempt,
	}
	if r.MaxNumBatchedTokens != 0 {
		mb := r.MaxNumBatchedTokens
		w.MaxBatched = &mb
	}
	if r.MaxActiveRequests != 0 {
		ma := r.MaxActiveRequests
		w.MaxActive = &ma
	}
	for i, rk := range r.Ranks {
		w.Ranks[i] = wire.RankLoad{Rank: uint32(rk.DPRank), ActivePrefillTokens: rk.ActivePrefillTokens,
			ActiveDecodeBlocks: rk.ActiveDecodeBlocks, KVUsedBlocks: rk.KVUsedBlocks, ActiveRequests: rk.ActiveRequests}
	}
	return w
}

// MarshalJSON encodes r as wire.LoadReport.
func (r Report) MarshalJSON() ([]byte, error) {
	w := r.Wire()
	return wire.AppendLoadReport(nil, &w), nil
}

// UnmarshalJSON decodes a wire.LoadReport into r; absent fields are zero.
func (r *Report) UnmarshalJSON(b []byte) error {
	var w wire.LoadReport
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Report{TotalKVBlocks: w.TotalKV, Taints: w.Taints, Draining: w.Draining, Instance: w.Instance,
		CompactDispatch: w.CompactDispatch, Preempt: w.Preempt}
	if w.WorkerID != nil {
		r.WorkerID = *w.WorkerID
	}
	if w.DPStart != nil {
		r.DPStart = int(*w.DPStart)
	}
	if w.DPSize != nil {
		r.DPSize = int(*w.DPSize)
	}
	if w.MaxBatched != nil {
		r.MaxNumBatchedTokens = *w.MaxBatched
	}
	if w.MaxActive != nil {
		r.MaxActiveRequests = *w.MaxActive
	}
	if w.TTLms != nil {
		r.TTLMs = int64(*w.TTLms)
	}
	if w.SeenSeq != nil {
		r.SeenSeq = *w.SeenSeq
	}
	if w.Ranks != nil {
		r.Ranks = make([]RankReport, len(w.Ranks))
		for i, rk := range w.Ranks {
			r.Ranks[i] = RankReport{DPRank: int(rk.Rank), ActivePrefillTokens: rk.ActivePrefillTokens,
				ActiveDecodeBlocks: rk.ActiveDecodeBlocks, KVUsedBlocks: rk.KVUsedBlocks, ActiveRequests: rk.ActiveRequests}
		}
	}
	return nil
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
	pk := &w.peak[i]
	pk.ActivePrefillTokens = max(pk.ActivePrefillTokens, l.ActivePrefillTokens)
	pk.ActiveRequests = max(pk.ActiveRequests, l.ActiveRequests)
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

// kickSeen asks for a report after a dispatch was answered (seen_seq
// moved); a change of load or draining kicks on its own (kickReport).
func (w *Worker) kickSeen() {
	select {
	case w.seenKick <- struct{}{}:
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
	if !w.cfg.HeaderForm {
		rep.CompactDispatch = wire.CompactDispatch
	}
	rep.Preempt = w.cfg.Preempt
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
	wl := rep.Wire()
	b := wire.AppendLoadReport(make([]byte, 0, 256), &wl)
	if err := w.nc.Publish(w.loadSubj, b); err != nil {
		return false, fmt.Errorf("worker: publish report to %s: %w", w.loadSubj, err)
	}
	w.mu.Lock()
	// What the report said (its snapshot), not the load of now, which may
	// have moved since: a fall in between is news for the next report.
	sent := w.published.ranks[:0]
	for _, r := range rep.Ranks {
		sent = append(sent, RankLoad{ActivePrefillTokens: r.ActivePrefillTokens, ActiveDecodeBlocks: r.ActiveDecodeBlocks,
			KVUsedBlocks: r.KVUsedBlocks, ActiveRequests: r.ActiveRequests})
	}
	w.published = publishedState{ranks: sent, draining: rep.Draining, seen: rep.SeenSeq, valid: true}
	copy(w.peak, w.ranks)
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

// capacityFreed reports whether some rank's active prefill tokens or active
// requests fell since the last published report: below what it said, or
// below their peak since (a request accepted since then, which the dispatcher
// counts as a booking until a report counts it, finished or finished its
// prefill). Such a report skips MinReportInterval: the dispatcher sends a full
// rank nothing until it hears, so the gap would leave the slot idle. Each fall
// needs a new rise first, so that is at most two reports per request.
func (w *Worker) capacityFreed() bool {
	return w.sincePublished(func(p *publishedState) bool {
		if len(p.ranks) != len(w.ranks) {
			return false
		}
		for i, l := range w.ranks {
			was := p.ranks[i]
			was.ActivePrefillTokens = max(was.ActivePrefillTokens, w.peak[i].ActivePrefillTokens)
			was.ActiveRequests = max(was.ActiveRequests, w.peak[i].ActiveRequests)
			if l.ActivePrefillTokens < was.ActivePrefillTokens || l.ActiveRequests < was.ActiveRequests {
				return true
			}
		}
		return false
	})
}

// reportNews is what a report would say now that the last published one did not.
type reportNews uint8

const (
	newsUnknown  reportNews = iota // before the first report, or while an Offer is in progress
	newsNone                       // nothing: a kick needs no report
	newsSeenOnly                   // only seen_seq moved: the report may wait (Config.SeenOnlyInterval)
	newsLoad                       // the load or the draining flag moved
)

// news compares the current state with the last published report.
func (w *Worker) news() reportNews {
	n := newsUnknown
	w.sincePublished(func(p *publishedState) bool {
		switch {
		case p.draining != w.draining || !slices.Equal(p.ranks, w.ranks):
			n = newsLoad
		case p.seen != w.seenSeq:
			n = newsSeenOnly
		default:
			n = newsNone
		}
		return true
	})
	return n
}

// sincePublished returns changed's answer, asked with w.mu held about what
// the last published report said: false, without asking, before the first
// report and while an Offer is in progress (no report goes out then).
func (w *Worker) sincePublished(changed func(p *publishedState) bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.published.valid && !w.offering && changed(&w.published)
}
