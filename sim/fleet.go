package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"fairdispatch/workers"
)

// WorkerSpec is one modelled worker (see the package comment for the model).
type WorkerSpec struct {
	ID     string        `json:"worker_id"`
	Ranks  int           `json:"ranks"`             // data-parallel ranks, >= 1
	Rate   float64       `json:"tokens_per_second"` // prefill throughput of one rank, uncached tokens per second, > 0
	Decode time.Duration `json:"decode_ns"`         // per request, after its prefill
	// MaxBatched is the max_num_batched_tokens it reports (0: unknown), which
	// thresholds given as fractions need.
	MaxBatched uint64 `json:"max_num_batched_tokens,omitempty"`
	Join       int64  `json:"join_unix_ns"` // when it first reports, Unix ns (virtual time)
}

// Fleet is the modelled fleet.
type Fleet []WorkerSpec

// Uniform returns n workers "w1".."wn", alike, joining at join.
func Uniform(n, ranks int, rate float64, decode time.Duration, maxBatched uint64, join int64) Fleet {
	f := make(Fleet, n)
	for i := range f {
		f[i] = WorkerSpec{ID: fmt.Sprintf("w%d", i+1), Ranks: ranks, Rate: rate, Decode: decode, MaxBatched: maxBatched, Join: join}
	}
	return f
}

// FromTrace derives the fleet from a trace's dispatches: one worker per
// worker id dispatched to, with as many ranks as the highest rank used plus
// one, joining at its first dispatch, and a rank's rate the uncached tokens
// dispatched to the worker per second between its first and last dispatch,
// divided by its ranks (the throughput it showed while kept busy; a worker
// that was often idle shows less than it can do). Across a restart of the
// dispatcher (Trace.Restarts) the spans of each part are added, not the gap.
// A worker with fewer than two dispatches in every part, or all at one
// instant, gets defaultRate. decode and maxBatched are as in WorkerSpec.
func FromTrace(t *Trace, defaultRate float64, decode time.Duration, maxBatched uint64) (Fleet, error) {
	type acc struct {
		join        int64
		first, last int64 // of the current part
		lastCost    uint64
		part        int
		cost        uint64 // served within the parts' spans
		span        int64
		ranks       int
	}
	by := map[string]*acc{}
	part := func(ts int64) int { // the part of the trace ts falls in
		n := 0
		for _, r := range t.Restarts {
			if ts >= r {
				n++
			}
		}
		return n
	}
	for _, d := range t.Dispatches {
		p := part(d.T)
		a := by[d.Worker]
		switch {
		case a == nil:
			a = &acc{join: d.T, first: d.T, part: p}
			by[d.Worker] = a
		case a.part != p: // a new part: close the last one's span
			a.span += a.last - a.first
			a.first, a.part = d.T, p
		default:
			a.cost += a.lastCost // served before this dispatch, within the part
		}
		a.last, a.lastCost = d.T, d.Cost
		a.ranks = max(a.ranks, d.Rank+1)
	}
	if len(by) == 0 {
		return nil, fmt.Errorf("the trace has no accepted dispatch to derive a fleet from: give the fleet with --workers")
	}
	var f Fleet
	for id, a := range by {
		a.span += a.last - a.first
		rate := defaultRate
		if a.span > 0 && a.cost > 0 {
			rate = float64(a.cost) / (float64(a.span) / 1e9) / float64(a.ranks)
		}
		f = append(f, WorkerSpec{ID: id, Ranks: a.ranks, Rate: rate, Decode: decode, MaxBatched: maxBatched, Join: a.join})
	}
	slices.SortFunc(f, func(a, b WorkerSpec) int { return cmp.Compare(a.ID, b.ID) })
	return f, nil
}

// job is a request inside a modelled rank.
type job struct {
	d       *Dispatch
	cost    uint64
	prefEnd int64 // when its prefill ends; 0 while waiting for the rank
	doneAt  int64
}

// rank is one modelled data-parallel rank.
type rank struct {
	queue    []*job // received, prefill not finished; queue[0] prefills
	decoding []*job // prefilled, decoding
	prefill  uint64 // cost of queue
}

// worker is one modelled worker.
type worker struct {
	spec   WorkerSpec
	ranks  []rank
	seen   uint64
	joined bool
	last   int64 // last report
}

func newWorker(s WorkerSpec) *worker {
	return &worker{spec: s, ranks: make([]rank, s.Ranks)}
}

func (w *worker) report() workers.Report {
	rep := workers.Report{WorkerID: w.spec.ID, DPSize: uint32(w.spec.Ranks), MaxBatched: w.spec.MaxBatched,
		TTLms: workers.MaxTTLms, Instance: "sim", SeenSeq: w.seen, HasSeenSeq: true}
	for i := range w.ranks {
		r := &w.ranks[i]
		rep.Ranks = append(rep.Ranks, workers.RankLoad{Rank: uint32(i), ActivePrefillTokens: r.prefill,
			ActiveRequests: uint64(len(r.queue) + len(r.decoding))})
	}
	return rep
}

// prefillNs is how long cost tokens take to prefill on one rank.
func (w *worker) prefillNs(cost uint64) int64 {
	return max(1, int64(float64(cost)/w.spec.Rate*1e9))
}

func (w *worker) receive(now int64, rk int, seq uint64, d *Dispatch) {
	r := &w.ranks[rk]
	j := &job{d: d, cost: d.Cost}
	r.queue = append(r.queue, j)
	r.prefill += j.cost
	w.seen = max(w.seen, seq)
	if len(r.queue) == 1 {
		j.prefEnd = now + w.prefillNs(j.cost)
	}
}

// next returns the time of the worker's next change, or -1.
func (w *worker) next() int64 {
	t := int64(-1)
	early := func(e int64) {
		if t < 0 || e < t {
			t = e
		}
	}
	for i := range w.ranks {
		r := &w.ranks[i]
		if len(r.queue) > 0 {
			early(r.queue[0].prefEnd)
		}
		for _, j := range r.decoding {
			early(j.doneAt)
		}
	}
	return t
}

// advance applies every change due by now and appends the completed
// dispatches to done; changed says whether a rank's load changed (a prefill
// ended, a request completed), which the worker then reports at once, as a
// real one does.
func (w *worker) advance(now int64, done []*Dispatch) (_ []*Dispatch, changed bool) {
	for i := range w.ranks {
		r := &w.ranks[i]
		for len(r.queue) > 0 && r.queue[0].prefEnd <= now {
			changed = true
			j := r.queue[0]
			r.queue = r.queue[1:]
			r.prefill -= j.cost
			j.doneAt = j.prefEnd + int64(w.spec.Decode)
			r.decoding = append(r.decoding, j)
			if len(r.queue) > 0 {
				r.queue[0].prefEnd = j.prefEnd + w.prefillNs(r.queue[0].cost)
			}
		}
		kept := r.decoding[:0]
		for _, j := range r.decoding {
			if j.doneAt <= now {
				done = append(done, j.d)
				changed = true
				continue
			}
			kept = append(kept, j)
		}
		clear(r.decoding[len(kept):])
		r.decoding = kept
	}
	return done, changed
}
