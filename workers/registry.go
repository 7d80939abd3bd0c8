package workers

import (
	"math"
	"slices"
	"sort"
)

// Exclusion after refusals (docs/protocol.md, Refusals back off): the n-th
// refused probe in a row excludes a worker for min(MinExclusion * 2^(n-1),
// MaxExclusion), in nanoseconds.
const (
	MinExclusion = int64(10e6)
	MaxExclusion = int64(1e9)
)

// awaiting is ExcludedUntil while a probe to the worker is unanswered.
const awaiting = math.MaxInt64

// Load is the dispatcher's view of one rank: the last report plus every booking
// the report does not yet count (docs/protocol.md, Load report).
type Load struct {
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  uint64
	KVUsedBlocks        uint64
	ActiveRequests      uint64
}

// Rank is one data-parallel rank of a live worker.
type Rank struct {
	Reported RankLoad
	// Booked is the prefill cost, and BookedRequests the number of requests, of
	// the dispatches to this rank that the last report does not count.
	Booked         uint64
	BookedRequests uint64
	// Latch is the decode latch (docs/design.md, Worker selection); package filters maintains it.
	Latch bool
}

// Load returns the rank's load as the dispatcher sees it.
func (r *Rank) Load() Load {
	return Load{
		ActivePrefillTokens: sat(r.Reported.ActivePrefillTokens, r.Booked),
		ActiveDecodeBlocks:  r.Reported.ActiveDecodeBlocks,
		KVUsedBlocks:        r.Reported.KVUsedBlocks,
		ActiveRequests:      sat(r.Reported.ActiveRequests, r.BookedRequests),
	}
}

type booking struct {
	seq  uint64
	rank uint32 // index into Worker.Ranks
	cost uint64
	at   int64
}

// Worker is a live worker. Its fields are read-only outside this package, with
// the exception of Rank.Latch.
type Worker struct {
	ID         string
	Instance   string
	Start      uint32
	Ranks      []Rank // Ranks[i] is dp rank Start+i
	MaxBatched uint64
	TotalKV    uint64
	Taints     []string // sorted
	Draining   bool
	// MaxActive is max_active_requests, each rank's capacity in requests; 0: none.
	MaxActive uint64
	// Compact is the compact dispatch form's version to send it; 0: the
	// header form (Report.Compact).
	Compact uint8
	// Preempt: the worker acts on cancellations with reason preempt
	// (Report.Preempt).
	Preempt    bool
	TTL        int64 // nanoseconds
	journaled  bool  // in Registry.changed
	LastReport int64 // Unix nanoseconds of the last valid report
	// Excluded is set while the worker is left out of selection after a
	// refusal ([Registry.Refused]), until ExcludedUntil (Unix nanoseconds), or
	// while a probe sent after refusals is unanswered (docs/protocol.md,
	// Refusals back off). Tests may set it directly.
	Excluded      bool
	ExcludedUntil int64

	seenSeq  uint64 // of the last report
	nextSeq  uint64
	bookings []booking // increasing seq

	refusals  int    // refused probes in a row since the last acceptance
	probeFrom uint64 // dispatches below this seq were sent before the last exclusion began

	rival           string // another instance reporting under this id, dropped
	rivalLast       int64  // when the rival last reported
	ownerAfterRival bool   // the owner reported while the rival was live
}

// Full reports whether rank rk of w is at or over the worker's capacity
// (max_active_requests), counting bookings: it is then busy for every class
// gate and no candidate for selection.
func (w *Worker) Full(rk *Rank) bool {
	return w.MaxActive > 0 && sat(rk.Reported.ActiveRequests, rk.BookedRequests) >= w.MaxActive
}

// Refusals returns the number of refused probes in a row since the worker last accepted.
func (w *Worker) Refusals() int { return w.refusals }

// HasTaint reports whether the worker carries taint t.
func (w *Worker) HasTaint(t string) bool {
	_, ok := slices.BinarySearch(w.Taints, t)
	return ok
}

// HasRank reports whether rank lies in [Start, Start+len(Ranks)).
func (w *Worker) HasRank(rank int32) bool {
	return rank >= int32(w.Start) && int64(rank) < int64(w.Start)+int64(len(w.Ranks))
}

// Rank returns dp rank r, which must satisfy HasRank.
func (w *Worker) Rank(r int32) *Rank { return &w.Ranks[r-int32(w.Start)] }

// Bookings returns the number of dispatches booked and not yet counted by a report.
func (w *Worker) Bookings() int { return len(w.bookings) }

// Booking is one dispatch booked on a worker and not yet counted by a report.
type Booking struct {
	Seq  uint64 // its Dispatch-Seq
	Rank int32  // the dp rank it was booked on
	Cost uint64 // prefill tokens booked
	At   int64  // when it was booked, Unix nanoseconds
}

// AppendBookings appends w's bookings to dst in sequence order and returns
// the extended slice: for tests and debugging (the scheduler's scenario dump),
// not the dispatch path. O(B) for B bookings.
func (w *Worker) AppendBookings(dst []Booking) []Booking {
	for _, b := range w.bookings {
		dst = append(dst, Booking{Seq: b.seq, Rank: int32(w.Start) + int32(b.rank), Cost: b.cost, At: b.at})
	}
	return dst
}

// Change says what applying a report did.
type Change struct {
	New     bool // the worker was not live before
	Dropped int  // bookings dropped (counted by the report, restart, or age)
	// Rival is set when the report was dropped, not applied: it came from
	// another instance than the one that holds the worker id, which is live
	// and not draining (docs/protocol.md, One worker id, one process).
	Rival bool
	// Conflict is set when two instances are live under the id: both have
	// reported within the TTL, the holder after the other one appeared.
	// Owner and Other then name the holder's instance and the other's.
	Conflict     bool
	Owner, Other string
	// Restarted is set when the report is from another instance than the
	// last one, or its seen_seq went back: what the worker ran before is gone.
	Restarted bool
}

// touch journals w as changed (see [Registry.Changed]). The journal is
// bounded: past twice the live workers (plus a margin) it is dropped and the
// next Changed says to look at every worker.
func (g *Registry) touch(w *Worker) {
	if w.journaled || g.overflow {
		return
	}
	if len(g.changed) >= 2*len(g.list)+64 {
		for _, x := range g.changed {
			x.journaled = false
		}
		clear(g.changed)
		g.changed, g.overflow = g.changed[:0], true
		return
	}
	w.journaled = true
	g.changed = append(g.changed, w)
}

// Touch journals w as changed. Call it after changing a field of w outside
// the registry (Rank.Latch, or a test setting Excluded), so that an index
// following [Registry.Changed] sees it.
func (g *Registry) Touch(w *Worker) { g.touch(w) }

// Changed returns the workers that may have changed (reports, bookings,
// releases, exclusions, expiry: anything that moves a rank's load or a
// worker's membership in selection) since the last call, each once, and
// starts a new journal. A worker that is no longer live is listed too: check
// with Get. When all is true the journal overflowed and the caller must treat
// every live worker (All) as changed, and forget the others. The slice is
// valid until the next call that changes the registry. It lets an index over
// the ranks (filters.Selector) update only what moved. O(1) amortised per
// change.
func (g *Registry) Changed() (ws []*Worker, all bool) {
	ws, all = g.changed, g.overflow
	for _, w := range ws {
		w.journaled = false
	}
	g.changed, g.overflow = g.changed[:0], false
	return ws, all
}

// Registry holds the live workers. It is not safe for concurrent use.
type Registry struct {
	byID map[string]*Worker
	list []*Worker // sorted by ID, for deterministic iteration
	// MaxWorkers caps the number of live workers; a report from a new worker
	// beyond it is refused (0: no cap).
	MaxWorkers int
	paused     bool
	// nextSeq remembers the next sequence number of expired workers, so that
	// one coming back never reuses a number still in flight (docs/protocol.md, Load report).
	nextSeq map[string]uint64
	aged    []*Worker
	// changed journals the workers whose load, membership or liveness may
	// have changed since the last [Registry.Changed] drain, once each.
	changed  []*Worker
	overflow bool
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{byID: make(map[string]*Worker), nextSeq: make(map[string]uint64)}
}

// Len returns the number of live workers.
func (g *Registry) Len() int { return len(g.list) }

// Get returns the live worker with that id, or nil.
func (g *Registry) Get(id string) *Worker { return g.byID[id] }

// All returns the live workers sorted by id. The slice is the registry's own:
// do not modify it, and do not keep it across calls that change the registry.
func (g *Registry) All() []*Worker { return g.list }

// Apply applies a validated report received at now (Unix ns). It returns false,
// and changes nothing, when the worker is new and the registry is full.
//
// Instances: the instance that holds the id keeps it while it is live and not
// draining; a report from another instance meanwhile is dropped (Change.Rival),
// and Change.Conflict says when both are live. Once the holder is draining or
// has been silent for its TTL, a report from another instance takes the id
// over as a restart.
//
// Bookings: a change of instance, or a seen_seq lower than the previous
// report's, drops them all (the worker restarted); otherwise the report counts
// every booking with seq <= seen_seq (every booking, without seen_seq); and a
// booking older than the worker's TTL is dropped in any case. Sequence numbers
// continue above every seen_seq received.
func (g *Registry) Apply(now int64, r Report) (*Worker, Change, bool) {
	w := g.byID[r.WorkerID]
	var ch Change
	if w == nil {
		if g.MaxWorkers > 0 && len(g.list) >= g.MaxWorkers {
			return nil, ch, false
		}
		w = &Worker{ID: r.WorkerID, Instance: r.Instance, nextSeq: max(1, g.nextSeq[r.WorkerID])}
		delete(g.nextSeq, r.WorkerID)
		g.byID[w.ID] = w
		i := sort.Search(len(g.list), func(i int) bool { return g.list[i].ID >= w.ID })
		g.list = slices.Insert(g.list, i, w)
		ch.New = true
	}
	g.touch(w)
	if !ch.New && r.Instance != w.Instance {
		if !w.Draining && now-w.LastReport <= w.TTL {
			if w.rival != r.Instance {
				w.rival, w.ownerAfterRival = r.Instance, false
			}
			w.rivalLast = now
			ch.Rival, ch.Conflict, ch.Owner, ch.Other = true, w.ownerAfterRival, w.Instance, r.Instance
			return w, ch, true
		}
		w.rival, w.ownerAfterRival = "", false // taken over: a restart
	}
	if w.rival != "" {
		if now-w.rivalLast <= w.TTL {
			w.ownerAfterRival = true
			ch.Conflict, ch.Owner, ch.Other = true, w.Instance, w.rival
		} else {
			w.rival, w.ownerAfterRival = "", false
		}
	}
	restarted := !ch.New && (r.Instance != w.Instance || (r.HasSeenSeq && r.SeenSeq < w.seenSeq))
	ch.Restarted = restarted
	w.Instance = r.Instance
	w.MaxBatched, w.TotalKV, w.Draining, w.MaxActive = r.MaxBatched, r.TotalKV, r.Draining, r.MaxActive
	w.Compact, w.Preempt = r.Compact, r.Preempt
	w.TTL = int64(r.TTLms) * 1e6
	w.LastReport = now
	if w.Excluded && w.ExcludedUntil <= now {
		w.Excluded = false
	}
	if !slices.Equal(w.Taints, r.Taints) {
		w.Taints = slices.Clone(r.Taints)
		slices.Sort(w.Taints)
		w.Taints = slices.Compact(w.Taints)
	}

	reshaped := w.Start != r.DPStart || len(w.Ranks) != int(r.DPSize)
	if reshaped {
		w.Start = r.DPStart
		w.Ranks = make([]Rank, r.DPSize)
	}
	for i := range w.Ranks {
		w.Ranks[i].Reported = RankLoad{Rank: w.Start + uint32(i)}
	}
	for _, rl := range r.Ranks {
		w.Ranks[rl.Rank-w.Start].Reported = rl
	}

	switch {
	case restarted || reshaped || !r.HasSeenSeq:
		ch.Dropped = len(w.bookings)
		w.bookings = w.bookings[:0]
	default:
		n := sort.Search(len(w.bookings), func(i int) bool { return w.bookings[i].seq > r.SeenSeq })
		ch.Dropped = n
		w.bookings = append(w.bookings[:0], w.bookings[n:]...)
	}
	ch.Dropped += w.dropOld(now)
	if r.HasSeenSeq {
		w.seenSeq = r.SeenSeq
		if r.SeenSeq >= w.nextSeq {
			w.nextSeq = r.SeenSeq + 1
		}
	}
	w.rebook()
	return w, ch, true
}

// dropOld drops bookings older than the TTL and returns how many it dropped.
func (w *Worker) dropOld(now int64) int {
	n := 0
	for n < len(w.bookings) && now-w.bookings[n].at > w.TTL {
		n++
	}
	if n > 0 {
		w.bookings = append(w.bookings[:0], w.bookings[n:]...)
	}
	return n
}

// rebook recomputes the booked totals of every rank from the bookings.
func (w *Worker) rebook() {
	for i := range w.Ranks {
		w.Ranks[i].Booked, w.Ranks[i].BookedRequests = 0, 0
	}
	for _, b := range w.bookings {
		rk := &w.Ranks[b.rank]
		rk.Booked = sat(rk.Booked, b.cost)
		rk.BookedRequests++
	}
}

// Book records a dispatch of the given cost to dp rank `rank` of w at now and
// returns its sequence number, the Dispatch-Seq header (docs/protocol.md, Load report).
func (g *Registry) Book(now int64, w *Worker, rank int32, cost uint64) uint64 {
	seq := w.nextSeq
	w.nextSeq++
	i := uint32(rank - int32(w.Start))
	w.bookings = append(w.bookings, booking{seq: seq, rank: i, cost: cost, at: now})
	rk := &w.Ranks[i]
	rk.Booked = sat(rk.Booked, cost)
	rk.BookedRequests++
	g.touch(w)
	g.probe(w)
	return seq
}

// probe is called by Book: a dispatch to a worker that has refused in a row is
// a probe, and the worker is excluded until it is answered ([Registry.Refused],
// [Registry.Accepted]), so that at most one offer is in flight to it.
func (g *Registry) probe(w *Worker) {
	if w.refusals > 0 {
		w.Excluded, w.ExcludedUntil = true, awaiting
	}
}

// Refused records that w refused the dispatch with sequence seq, or did not
// answer it, at now (docs/protocol.md, Refusals back off). A dispatch sent
// after w's last exclusion began (a probe) counts one refusal more and
// excludes w for min(MinExclusion * 2^(n-1), MaxExclusion) from now, n the
// refusals in a row; a dispatch sent earlier (of the same burst) changes
// nothing. The booking is released by [Registry.Unbook], not here.
func (g *Registry) Refused(now int64, w *Worker, seq uint64) {
	if seq < w.probeFrom {
		return
	}
	g.touch(w)
	w.refusals++
	d := MaxExclusion
	if w.refusals <= 30 {
		d = min(MinExclusion<<(w.refusals-1), MaxExclusion)
	}
	w.Excluded, w.ExcludedUntil = true, now+d
	w.probeFrom = w.nextSeq
}

// Accepted records that w accepted a dispatch: its refusals in a row reset and
// any exclusion ends. It reports whether w was excluded.
func (g *Registry) Accepted(w *Worker) bool {
	g.touch(w)
	w.refusals = 0
	was := w.Excluded
	w.Excluded, w.ExcludedUntil = false, 0
	return was
}

// Unbook releases the booking with sequence seq, when it is still held (a
// refused or unanswered dispatch). It reports whether it found it.
func (g *Registry) Unbook(w *Worker, seq uint64) bool {
	i := sort.Search(len(w.bookings), func(i int) bool { return w.bookings[i].seq >= seq })
	if i == len(w.bookings) || w.bookings[i].seq != seq {
		return false
	}
	g.touch(w)
	b := w.bookings[i]
	w.bookings = append(w.bookings[:i], w.bookings[i+1:]...)
	rk := &w.Ranks[b.rank]
	rk.Booked -= b.cost
	rk.BookedRequests--
	return true
}

// Unsent releases the booking of the dispatch with sequence seq, which never
// reached w through no fault of w's (docs/decisions.md, Whose fault is an
// error), as Unbook does; when that dispatch was the probe w is excluded for
// (docs/protocol.md, Refusals back off), the wait for its answer ends too: no
// answer will come, and w's next offer is the probe again. It reports whether
// it found the booking.
func (g *Registry) Unsent(w *Worker, seq uint64) bool {
	found := g.Unbook(w, seq)
	if w.Excluded && w.ExcludedUntil == awaiting && seq >= w.probeFrom {
		w.Excluded, w.ExcludedUntil = false, 0
		g.touch(w)
	}
	return found
}

// Expire removes every worker whose TTL has run out at now, appending them to
// dst, drops bookings older than their worker's TTL, and ends exclusions due
// by now (Aged then lists the live workers whose load or exclusion changed
// so). While paused it does nothing: no TTL runs out while the dispatcher is
// disconnected.
func (g *Registry) Expire(now int64, dst []*Worker) []*Worker {
	clear(g.aged)
	g.aged = g.aged[:0]
	if g.paused {
		return dst
	}
	kept := g.list[:0]
	for _, w := range g.list {
		if now-w.LastReport > w.TTL {
			delete(g.byID, w.ID)
			if len(g.nextSeq) >= max(g.MaxWorkers, 1024)*4 {
				clear(g.nextSeq) // bounded memory; a flood of ids must not grow it
			}
			g.nextSeq[w.ID] = w.nextSeq
			g.touch(w)
			dst = append(dst, w)
			continue
		}
		changed := false
		if w.dropOld(now) > 0 {
			w.rebook()
			changed = true
		}
		if w.Excluded && w.ExcludedUntil <= now {
			w.Excluded = false
			changed = true
		}
		if changed {
			g.touch(w)
			g.aged = append(g.aged, w)
		}
		kept = append(kept, w)
	}
	clear(g.list[len(kept):])
	g.list = kept
	return dst
}

// Aged returns the live workers whose bookings the last Expire aged out, or
// whose exclusion it ended.
func (g *Registry) Aged() []*Worker { return g.aged }

// Pause stops every TTL clock (the dispatcher lost its NATS connection).
func (g *Registry) Pause() { g.paused = true }

// Resume restarts the TTL clocks from now.
func (g *Registry) Resume(now int64) {
	if !g.paused {
		return
	}
	g.paused = false
	for _, w := range g.list {
		w.LastReport = now
		for i := range w.bookings {
			w.bookings[i].at = now
		}
	}
}

// sat adds without wrapping.
func sat(a, b uint64) uint64 {
	if c := a + b; c >= a {
		return c
	}
	return ^uint64(0)
}
