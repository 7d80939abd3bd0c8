package workers

import (
	"slices"
	"sort"
)

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
	TTL        int64 // nanoseconds
	LastReport int64 // Unix nanoseconds of the last valid report
	// Excluded is set when the worker refused a dispatch or did not answer; it is
	// left out of selection until its next load report (docs/protocol.md, Dispatch handshake).
	Excluded bool

	seenSeq  uint64 // of the last report
	nextSeq  uint64
	bookings []booking // increasing seq
}

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

// Change says what applying a report did.
type Change struct {
	New     bool // the worker was not live before
	Dropped int  // bookings dropped (counted by the report, restart, or age)
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
	restarted := !ch.New && (r.Instance != w.Instance || (r.HasSeenSeq && r.SeenSeq < w.seenSeq))
	w.Instance = r.Instance
	w.MaxBatched, w.TotalKV, w.Draining = r.MaxBatched, r.TotalKV, r.Draining
	w.TTL = int64(r.TTLms) * 1e6
	w.LastReport = now
	w.Excluded = false
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
	return seq
}

// Unbook releases the booking with sequence seq, when it is still held (a
// refused or unanswered dispatch). It reports whether it found it.
func (g *Registry) Unbook(w *Worker, seq uint64) bool {
	i := sort.Search(len(w.bookings), func(i int) bool { return w.bookings[i].seq >= seq })
	if i == len(w.bookings) || w.bookings[i].seq != seq {
		return false
	}
	b := w.bookings[i]
	w.bookings = append(w.bookings[:i], w.bookings[i+1:]...)
	rk := &w.Ranks[b.rank]
	rk.Booked -= b.cost
	rk.BookedRequests--
	return true
}

// Expire removes every worker whose TTL has run out at now, appending them to
// dst, and drops bookings older than their worker's TTL (Aged then lists the
// live workers whose load changed so). While paused it does nothing: no TTL
// runs out while the dispatcher is disconnected.
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
			dst = append(dst, w)
			continue
		}
		if w.dropOld(now) > 0 {
			w.rebook()
			g.aged = append(g.aged, w)
		}
		kept = append(kept, w)
	}
	clear(g.list[len(kept):])
	g.list = kept
	return dst
}

// Aged returns the live workers whose bookings the last Expire aged out.
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
