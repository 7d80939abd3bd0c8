package workers

import (
	"errors"
	"fmt"

	"fairdispatch/wire"
)

// Bounds on a load report's fields (docs/protocol.md, Load report).
const (
	MinTTLms   = 100
	MaxTTLms   = 600_000
	DefaultTTL = 3000 // ms
	// MaxRanks bounds data_parallel_start_rank + data_parallel_size: ranks are at most 65535.
	MaxRanks = 65536
	// MaxTaints bounds the taints a worker may carry.
	MaxTaints = wire.MaxTaints
	// MaxActiveRequests bounds max_active_requests, the per-rank capacity.
	MaxActiveRequests = 1_000_000
	maxID             = 128
)

// RankLoad is the load of one data-parallel rank as reported (docs/protocol.md, Load report).
type RankLoad = wire.RankLoad

// Report is a validated load report with defaults applied.
type Report struct {
	WorkerID   string
	DPStart    uint32
	DPSize     uint32
	MaxBatched uint64 // max_num_batched_tokens; 0: unknown
	TotalKV    uint64 // total_kv_blocks; 0 turns the decode latch off
	// MaxActive is max_active_requests, the capacity of each rank in
	// requests; 0: the field was absent, no capacity.
	MaxActive  uint64
	Taints     []string
	Draining   bool
	TTLms      uint64
	Instance   string
	SeenSeq    uint64
	HasSeenSeq bool
	Ranks      []RankLoad // only ranks in [DPStart, DPStart+DPSize), each at most once
	// Compact is the compact dispatch form's version the dispatcher sends
	// this worker: compact_dispatch capped at wire.CompactDispatch; 0: the
	// header form (docs/protocol.md, Compact dispatch form).
	Compact uint8
	// Preempt: the worker acts on cancellations with reason preempt
	// (docs/protocol.md, Preemption); only such a worker is asked.
	Preempt bool
}

// DropReason says why a report was dropped; it labels the dropped-reports metric.
type DropReason string

// The reasons a load report is dropped, never applied.
const (
	DropParse    DropReason = "parse"    // not JSON of the report's shape
	DropMismatch DropReason = "mismatch" // subject token and worker_id disagree
	DropRank     DropReason = "rank"     // a rank outside [start, start+size), or repeated
	DropInvalid  DropReason = "invalid"  // a field out of its bounds
	DropCapacity DropReason = "capacity" // too many live workers (see Registry.MaxWorkers)
)

// ReportError is why ParseReport refused a report.
type ReportError struct {
	Reason DropReason
	Msg    string
}

func (e *ReportError) Error() string { return "load report " + string(e.Reason) + ": " + e.Msg }

// ParseReport decodes the report published on the subject whose last token is
// token, and validates it (docs/protocol.md, Load report). Unknown JSON fields are ignored, so that
// workers may add their own. The error is a *ReportError.
func ParseReport(token string, data []byte) (Report, error) {
	var w wire.LoadReport
	if err := wire.DecodeLoadReport(data, &w); err != nil {
		return Report{}, &ReportError{DropParse, err.Error()}
	}
	if w.WorkerID == nil {
		return Report{}, &ReportError{DropParse, "worker_id is required"}
	}
	if *w.WorkerID != token {
		return Report{}, &ReportError{DropMismatch, fmt.Sprintf("worker_id %q on subject token %q", *w.WorkerID, token)}
	}
	if !ValidID(token) {
		return Report{}, &ReportError{DropInvalid, fmt.Sprintf("worker_id %q is not a subject token of at most 128 bytes", token)}
	}
	r := Report{WorkerID: token, DPSize: 1, TTLms: DefaultTTL, TotalKV: w.TotalKV,
		Draining: w.Draining, Instance: w.Instance, Ranks: w.Ranks}
	if w.DPStart != nil {
		r.DPStart = *w.DPStart
	}
	if w.DPSize != nil {
		r.DPSize = *w.DPSize
	}
	if len(r.Instance) > maxID {
		return Report{}, &ReportError{DropInvalid, fmt.Sprintf("instance of %d bytes, at most %d", len(r.Instance), maxID)}
	}
	if r.DPSize == 0 || uint64(r.DPStart)+uint64(r.DPSize) > MaxRanks {
		return Report{}, &ReportError{DropInvalid, fmt.Sprintf("ranks [%d, %d+%d) out of [0, %d)", r.DPStart, r.DPStart, r.DPSize, MaxRanks)}
	}
	if w.MaxBatched != nil {
		r.MaxBatched = *w.MaxBatched
	}
	if w.MaxActive != nil {
		if *w.MaxActive < 1 || *w.MaxActive > MaxActiveRequests {
			return Report{}, &ReportError{DropInvalid, fmt.Sprintf("max_active_requests %d out of [1, %d]", *w.MaxActive, MaxActiveRequests)}
		}
		r.MaxActive = *w.MaxActive
	}
	if w.TTLms != nil {
		r.TTLms = *w.TTLms
	}
	if r.TTLms < MinTTLms || r.TTLms > MaxTTLms {
		return Report{}, &ReportError{DropInvalid, fmt.Sprintf("ttl_ms %d out of [%d, %d]", r.TTLms, MinTTLms, MaxTTLms)}
	}
	if len(w.Taints) > MaxTaints {
		return Report{}, &ReportError{DropInvalid, fmt.Sprintf("%d taints, at most %d", len(w.Taints), MaxTaints)}
	}
	for _, t := range w.Taints {
		if !ValidTaint(t) {
			return Report{}, &ReportError{DropInvalid, fmt.Sprintf("taint %q is not [A-Za-z0-9_.:/-]+ of at most 128 bytes", t)}
		}
	}
	r.Taints = w.Taints
	r.Compact = uint8(min(w.CompactDispatch, wire.CompactDispatch))
	r.Preempt = w.Preempt
	if w.SeenSeq != nil {
		r.SeenSeq, r.HasSeenSeq = *w.SeenSeq, true
	}
	if len(r.Ranks) > int(r.DPSize) {
		return Report{}, &ReportError{DropRank, fmt.Sprintf("%d ranks reported for size %d", len(r.Ranks), r.DPSize)}
	}
	// Repeats are found with a bitset over [start, start+size) once there are
	// more than a few ranks: a quadratic scan let one report of 58,000 ranks
	// (1 MB, within NATS's default max_payload) occupy the caller, the queue
	// actor, for seconds.
	var seen []uint64
	if len(r.Ranks) > smallRanks {
		seen = make([]uint64, (r.DPSize+63)/64)
	}
	for i, rk := range r.Ranks {
		if rk.Rank < r.DPStart || uint64(rk.Rank) >= uint64(r.DPStart)+uint64(r.DPSize) {
			return Report{}, &ReportError{DropRank, fmt.Sprintf("dp_rank %d outside [%d, %d)", rk.Rank, r.DPStart, r.DPStart+r.DPSize)}
		}
		dup := false
		if seen != nil {
			off := rk.Rank - r.DPStart
			dup = seen[off/64]&(1<<(off%64)) != 0
			seen[off/64] |= 1 << (off % 64)
		} else {
			for _, prev := range r.Ranks[:i] {
				dup = dup || prev.Rank == rk.Rank
			}
		}
		if dup {
			return Report{}, &ReportError{DropRank, fmt.Sprintf("dp_rank %d reported twice", rk.Rank)}
		}
	}
	return r, nil
}

// smallRanks is the most ranks ParseReport checks for repeats by comparing
// each with the ones before it, without allocating; above it uses a bitset.
const smallRanks = 8

// Reason returns the drop reason of an error from ParseReport, or "" for nil.
func Reason(err error) DropReason {
	var re *ReportError
	if errors.As(err, &re) {
		return re.Reason
	}
	if err != nil {
		return DropParse
	}
	return ""
}

// ValidID reports whether s is a worker id or class name: [A-Za-z0-9_-]+, at most 128 bytes.
func ValidID(s string) bool { return wire.ValidToken(s) }

// ValidTaint reports whether s is a taint: [A-Za-z0-9_.:/-]+, at most 128 bytes.
func ValidTaint(s string) bool { return wire.ValidTaint(s) }
