package workers_test

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/workers"
)

// refWorker is a deliberately naive model of one live worker's bookkeeping
// (docs/protocol.md, Load report): a plain list of bookings, filtered again and again.
type refWorker struct {
	instance    string
	draining    bool
	start, size uint32
	ttl, last   int64
	prevSeen    uint64
	hasPrevSeen bool
	maxSeen     uint64
	issued      uint64
	bookings    []refBooking
}

type refBooking struct {
	seq, cost uint64
	rank      uint32 // dp rank
	at        int64
}

func (w *refWorker) keep(f func(refBooking) bool) {
	w.bookings = slices.DeleteFunc(w.bookings, func(b refBooking) bool { return !f(b) })
}

type refRegistry struct {
	live   map[string]*refWorker
	gone   map[string]uint64 // the last sequence issued (or seen) to an expired worker
	max    int
	paused bool
}

func (g *refRegistry) apply(now int64, r workers.Report) bool {
	w, existed := g.live[r.WorkerID]
	if !existed {
		if g.max > 0 && len(g.live) >= g.max {
			return false
		}
		w = &refWorker{instance: r.Instance, issued: g.gone[r.WorkerID]}
		g.live[r.WorkerID] = w
	}
	if existed && r.Instance != w.instance && !w.draining && now-w.last <= w.ttl {
		return true // another live instance holds the id: dropped, nothing changes
	}
	restart := existed && (r.Instance != w.instance || (r.HasSeenSeq && w.hasPrevSeen && r.SeenSeq < w.prevSeen))
	reshape := !existed || r.DPStart != w.start || r.DPSize != w.size
	w.instance, w.start, w.size, w.ttl, w.last = r.Instance, r.DPStart, r.DPSize, int64(r.TTLms)*1e6, now
	w.draining = r.Draining
	if restart || reshape || !r.HasSeenSeq {
		w.bookings = nil
	} else {
		w.keep(func(b refBooking) bool { return b.seq > r.SeenSeq })
	}
	w.keep(func(b refBooking) bool { return now-b.at <= w.ttl })
	if r.HasSeenSeq {
		w.prevSeen, w.hasPrevSeen = r.SeenSeq, true
		w.maxSeen = max(w.maxSeen, r.SeenSeq)
	}
	return true
}

func (g *refRegistry) book(now int64, id string, rank uint32, cost uint64) uint64 {
	w := g.live[id]
	w.issued = max(w.issued, w.maxSeen) + 1
	w.bookings = append(w.bookings, refBooking{seq: w.issued, cost: cost, rank: rank, at: now})
	return w.issued
}

func (g *refRegistry) expire(now int64) {
	if g.paused {
		return
	}
	for id, w := range g.live {
		if now-w.last > w.ttl {
			delete(g.live, id)
			if g.gone == nil {
				g.gone = map[string]uint64{}
			}
			g.gone[id] = max(w.issued, w.maxSeen)
			continue
		}
		w.keep(func(b refBooking) bool { return now-b.at <= w.ttl })
	}
}

func (g *refRegistry) resume(now int64) {
	if !g.paused {
		return
	}
	g.paused = false
	for _, w := range g.live {
		w.last = now
		for i := range w.bookings {
			w.bookings[i].at = now
		}
	}
}

// TestRegistryModel checks Registry against refRegistry over random reports,
// bookings, releases, expiries and pauses: the same workers live, the same
// bookings held per rank, the same sequence numbers issued.
func TestRegistryModel(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	rapid.Check(t, func(t *rapid.T) {
		g := workers.New()
		g.MaxWorkers = rapid.IntRange(0, 4).Draw(t, "maxWorkers")
		ref := &refRegistry{live: map[string]*refWorker{}, max: g.MaxWorkers}
		now := int64(0)
		var seqs []uint64
		pick := func(t *rapid.T) string {
			if len(ref.live) == 0 {
				t.Skip("no live worker")
			}
			var live []string
			for id := range ref.live {
				live = append(live, id)
			}
			slices.Sort(live)
			return rapid.SampledFrom(live).Draw(t, "worker")
		}
		t.Repeat(map[string]func(*rapid.T){
			"report": func(t *rapid.T) {
				r := workers.Report{
					WorkerID: rapid.SampledFrom(names).Draw(t, "id"),
					DPStart:  uint32(rapid.IntRange(0, 1).Draw(t, "start")),
					DPSize:   uint32(rapid.IntRange(1, 2).Draw(t, "size")),
					TTLms:    rapid.Uint64Range(100, 500).Draw(t, "ttl"),
					Instance: rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "instance"),
					Draining: rapid.IntRange(0, 3).Draw(t, "draining") == 0,
				}
				if rapid.IntRange(0, 3).Draw(t, "hasSeen") > 0 {
					r.SeenSeq, r.HasSeenSeq = rapid.Uint64Range(0, 40).Draw(t, "seen"), true
					if rw := ref.live[r.WorkerID]; rw != nil && rapid.Bool().Draw(t, "nearPrev") {
						// Near the previous seen_seq and the bookings: where the edges are.
						r.SeenSeq = uint64(max(0, int64(rw.prevSeen)+rapid.Int64Range(-2, 3).Draw(t, "delta")))
					}
				}
				_, _, ok := g.Apply(now, r)
				if want := ref.apply(now, r); ok != want {
					t.Fatalf("Apply(%s): got ok %v, want %v", r.WorkerID, ok, want)
				}
			},
			"book": func(t *rapid.T) {
				id := pick(t)
				rw := ref.live[id]
				rank := rw.start + uint32(rapid.IntRange(0, int(rw.size)-1).Draw(t, "rank"))
				cost := rapid.Uint64Range(0, 100).Draw(t, "cost")
				got := g.Book(now, g.Get(id), int32(rank), cost)
				if want := ref.book(now, id, rank, cost); got != want {
					t.Fatalf("Book(%s): got seq %d, want %d", id, got, want)
				}
				seqs = append(seqs, got)
			},
			"unbook": func(t *rapid.T) {
				id := pick(t)
				if len(seqs) == 0 {
					t.Skip("nothing booked")
				}
				seq := rapid.SampledFrom(seqs).Draw(t, "seq")
				rw := ref.live[id]
				want := slices.ContainsFunc(rw.bookings, func(b refBooking) bool { return b.seq == seq })
				rw.keep(func(b refBooking) bool { return b.seq != seq })
				if got := g.Unbook(g.Get(id), seq); got != want {
					t.Fatalf("Unbook(%s, %d): got %v, want %v", id, seq, got, want)
				}
			},
			"tick": func(t *rapid.T) {
				now += rapid.Int64Range(0, 300).Draw(t, "advance") * 1e6
				gone := g.Expire(now, nil)
				before := len(ref.live)
				ref.expire(now)
				if want := before - len(ref.live); len(gone) != want {
					t.Fatalf("Expire: got %d removed, want %d", len(gone), want)
				}
			},
			"pause": func(t *rapid.T) {
				g.Pause()
				ref.paused = true
			},
			"resume": func(t *rapid.T) {
				g.Resume(now)
				ref.resume(now)
			},
			"": func(t *rapid.T) {
				if g.Len() != len(ref.live) {
					t.Fatalf("Len: got %d, want %d", g.Len(), len(ref.live))
				}
				all := g.All()
				if !slices.IsSortedFunc(all, func(a, b *workers.Worker) int { return strings.Compare(a.ID, b.ID) }) {
					t.Fatalf("All: got %v, want sorted by id", ids(all))
				}
				for _, w := range all {
					rw := ref.live[w.ID]
					if rw == nil {
						t.Fatalf("worker %s: live, want gone", w.ID)
					}
					if w.Start != rw.start || len(w.Ranks) != int(rw.size) {
						t.Fatalf("worker %s: got ranks [%d,+%d), want [%d,+%d)", w.ID, w.Start, len(w.Ranks), rw.start, rw.size)
					}
					if w.Bookings() != len(rw.bookings) {
						t.Fatalf("worker %s: got %d bookings, want %d", w.ID, w.Bookings(), len(rw.bookings))
					}
					for i := range w.Ranks {
						var cost, n uint64
						for _, b := range rw.bookings {
							if b.rank == w.Start+uint32(i) {
								cost, n = cost+b.cost, n+1
							}
						}
						if rk := &w.Ranks[i]; rk.Booked != cost || rk.BookedRequests != n {
							t.Fatalf("worker %s rank %d: got booked %d/%d, want %d/%d", w.ID, w.Start+uint32(i), rk.Booked, rk.BookedRequests, cost, n)
						}
					}
				}
			},
		})
	})
}
