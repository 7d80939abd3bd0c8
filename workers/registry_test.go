package workers_test

import (
	"slices"
	"testing"

	"fairdispatch/workers"
)

const ms = int64(1e6) // nanoseconds

// rep builds a valid report of worker id with one rank 0 and the default TTL.
func rep(id string, opts ...func(*workers.Report)) workers.Report {
	r := workers.Report{WorkerID: id, DPSize: 1, TTLms: workers.DefaultTTL}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func seen(n uint64) func(*workers.Report) {
	return func(r *workers.Report) { r.SeenSeq, r.HasSeenSeq = n, true }
}

func instance(s string) func(*workers.Report) {
	return func(r *workers.Report) { r.Instance = s }
}

func ttl(msec uint64) func(*workers.Report) {
	return func(r *workers.Report) { r.TTLms = msec }
}

func dp(start, size uint32) func(*workers.Report) {
	return func(r *workers.Report) { r.DPStart, r.DPSize = start, size }
}

func ranks(rl ...workers.RankLoad) func(*workers.Report) {
	return func(r *workers.Report) { r.Ranks = rl }
}

func mustApply(t *testing.T, g *workers.Registry, now int64, r workers.Report) (*workers.Worker, workers.Change) {
	t.Helper()
	w, ch, ok := g.Apply(now, r)
	if !ok {
		t.Fatalf("Apply(%s): got refused, want applied", r.WorkerID)
	}
	return w, ch
}

func TestApplyNewWorkerIsLive(t *testing.T) {
	g := workers.New()
	if got := g.Len(); got != 0 {
		t.Fatalf("Len of new registry: got %d, want 0", got)
	}
	r := rep("w1", dp(2, 3), ttl(500), instance("i1"), func(r *workers.Report) {
		r.MaxBatched, r.TotalKV, r.Draining = 8192, 100, true
		r.Taints = []string{"zone-b", "h200", "zone-b"}
	}, ranks(workers.RankLoad{Rank: 3, ActivePrefillTokens: 10, ActiveDecodeBlocks: 2, KVUsedBlocks: 3, ActiveRequests: 4}))
	w, ch := mustApply(t, g, 7*ms, r)
	if !ch.New {
		t.Errorf("Change.New: got false, want true")
	}
	if ch.Dropped != 0 {
		t.Errorf("Change.Dropped: got %d, want 0", ch.Dropped)
	}
	if got := g.Get("w1"); got != w {
		t.Errorf("Get(w1): got %p, want %p", got, w)
	}
	if got := g.Len(); got != 1 {
		t.Errorf("Len: got %d, want 1", got)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"ID", w.ID, "w1"},
		{"Instance", w.Instance, "i1"},
		{"Start", w.Start, uint32(2)},
		{"len(Ranks)", len(w.Ranks), 3},
		{"MaxBatched", w.MaxBatched, uint64(8192)},
		{"TotalKV", w.TotalKV, uint64(100)},
		{"Draining", w.Draining, true},
		{"TTL", w.TTL, 500 * ms},
		{"LastReport", w.LastReport, 7 * ms},
		{"Bookings", w.Bookings(), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if want := []string{"h200", "zone-b"}; !slices.Equal(w.Taints, want) {
		t.Errorf("Taints: got %v, want %v (sorted, deduplicated)", w.Taints, want)
	}
	for _, tt := range []struct {
		taint string
		want  bool
	}{{"h200", true}, {"zone-b", true}, {"zone-a", false}, {"", false}} {
		if got := w.HasTaint(tt.taint); got != tt.want {
			t.Errorf("HasTaint(%q): got %v, want %v", tt.taint, got, tt.want)
		}
	}
	// Missing ranks report zero load; reported ones are taken as they are.
	wantLoads := map[int32]workers.Load{
		2: {},
		3: {ActivePrefillTokens: 10, ActiveDecodeBlocks: 2, KVUsedBlocks: 3, ActiveRequests: 4},
		4: {},
	}
	for rk, want := range wantLoads {
		if got := w.Rank(rk).Load(); got != want {
			t.Errorf("rank %d Load: got %+v, want %+v", rk, got, want)
		}
		if got := w.Rank(rk).Reported.Rank; got != uint32(rk) {
			t.Errorf("rank %d Reported.Rank: got %d, want %d", rk, got, rk)
		}
	}
}

func TestHasRank(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", dp(2, 3)))
	for _, tt := range []struct {
		rank int32
		want bool
	}{{-1, false}, {0, false}, {1, false}, {2, true}, {3, true}, {4, true}, {5, false}, {1 << 20, false}} {
		if got := w.HasRank(tt.rank); got != tt.want {
			t.Errorf("HasRank(%d): got %v, want %v", tt.rank, got, tt.want)
		}
	}
}

func TestAllSortedByID(t *testing.T) {
	g := workers.New()
	for _, id := range []string{"m", "b", "z", "a", "c", "B"} {
		mustApply(t, g, 0, rep(id))
	}
	mustApply(t, g, 1, rep("b")) // an update does not reorder or duplicate
	var got []string
	for _, w := range g.All() {
		got = append(got, w.ID)
	}
	if want := []string{"B", "a", "b", "c", "m", "z"}; !slices.Equal(got, want) {
		t.Errorf("All: got %v, want %v", got, want)
	}
	if got := g.Get("nope"); got != nil {
		t.Errorf("Get(nope): got %v, want nil", got)
	}
}

// TestBookingsReconciledWithSeenSeq checks docs/protocol.md, Load report: the view of a rank is the
// report plus every booking the report does not count.
func TestBookingsReconciledWithSeenSeq(t *testing.T) {
	tests := []struct {
		name        string
		report      workers.Report
		wantBooked  uint64 // prefill tokens still booked on rank 0
		wantReqs    uint64
		wantDropped int
	}{
		{"seen_seq covers two of three", rep("w1", seen(2), instance("i")), 300, 1, 2},
		{"seen_seq covers none", rep("w1", seen(0), instance("i")), 600, 3, 0},
		{"seen_seq covers all", rep("w1", seen(3), instance("i")), 0, 0, 3},
		{"seen_seq beyond all", rep("w1", seen(10), instance("i")), 0, 0, 3},
		{"no seen_seq counts every earlier dispatch", rep("w1", instance("i")), 0, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := workers.New()
			w, _ := mustApply(t, g, 0, rep("w1", seen(0), instance("i"),
				ranks(workers.RankLoad{Rank: 0, ActivePrefillTokens: 1000, ActiveRequests: 1})))
			for i, cost := range []uint64{100, 200, 300} {
				if got, want := g.Book(ms, w, 0, cost), uint64(i+1); got != want {
					t.Fatalf("Book #%d: got seq %d, want %d", i+1, got, want)
				}
			}
			if got, want := w.Rank(0).Load().ActivePrefillTokens, uint64(1600); got != want {
				t.Fatalf("prefill after 3 bookings: got %d, want %d", got, want)
			}
			if got, want := w.Rank(0).Load().ActiveRequests, uint64(4); got != want {
				t.Fatalf("requests after 3 bookings: got %d, want %d", got, want)
			}
			tt.report.Ranks = []workers.RankLoad{{Rank: 0, ActivePrefillTokens: 5000, ActiveRequests: 7}}
			w2, ch := mustApply(t, g, 2*ms, tt.report)
			if w2 != w {
				t.Fatalf("Apply returned another *Worker for a live worker")
			}
			if ch.New {
				t.Errorf("Change.New: got true, want false")
			}
			if ch.Dropped != tt.wantDropped {
				t.Errorf("Change.Dropped: got %d, want %d", ch.Dropped, tt.wantDropped)
			}
			rk := w.Rank(0)
			if rk.Booked != tt.wantBooked || rk.BookedRequests != tt.wantReqs {
				t.Errorf("booked: got %d tokens %d requests, want %d %d", rk.Booked, rk.BookedRequests, tt.wantBooked, tt.wantReqs)
			}
			if got, want := rk.Load().ActivePrefillTokens, 5000+tt.wantBooked; got != want {
				t.Errorf("prefill view: got %d, want %d", got, want)
			}
			if got, want := rk.Load().ActiveRequests, 7+tt.wantReqs; got != want {
				t.Errorf("requests view: got %d, want %d", got, want)
			}
			if got, want := w.Bookings(), int(tt.wantReqs); got != want {
				t.Errorf("Bookings: got %d, want %d", got, want)
			}
		})
	}
}

func TestBookPerRank(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", dp(4, 2), seen(0)))
	g.Book(0, w, 4, 10)
	g.Book(0, w, 5, 20)
	g.Book(0, w, 5, 30)
	for _, tt := range []struct {
		rank      int32
		tok, reqs uint64
	}{{4, 10, 1}, {5, 50, 2}} {
		l := w.Rank(tt.rank).Load()
		if l.ActivePrefillTokens != tt.tok || l.ActiveRequests != tt.reqs {
			t.Errorf("rank %d: got %d tokens %d requests, want %d %d", tt.rank, l.ActivePrefillTokens, l.ActiveRequests, tt.tok, tt.reqs)
		}
	}
	// A report counting the first booking (seq 1, rank 4) keeps the other two.
	mustApply(t, g, 0, rep("w1", dp(4, 2), seen(1)))
	if got := w.Rank(4).Booked; got != 0 {
		t.Errorf("rank 4 Booked after seen_seq 1: got %d, want 0", got)
	}
	if got := w.Rank(5).Booked; got != 50 {
		t.Errorf("rank 5 Booked after seen_seq 1: got %d, want 50", got)
	}
	// AppendBookings lists what is left, in sequence order, with its dp rank.
	got := w.AppendBookings([]workers.Booking{{Seq: 99}})
	want := []workers.Booking{{Seq: 99}, {Seq: 2, Rank: 5, Cost: 20}, {Seq: 3, Rank: 5, Cost: 30}}
	if !slices.Equal(got, want) {
		t.Errorf("AppendBookings: got %+v, want %+v", got, want)
	}
}

func TestSequenceNeverAtOrBelowSeenSeq(t *testing.T) {
	tests := []struct {
		name    string
		reports []workers.Report
		books   int // bookings before the last report
		want    uint64
	}{
		{"fresh registry, no seen_seq", []workers.Report{rep("w1")}, 0, 1},
		{"fresh registry, seen_seq 1000", []workers.Report{rep("w1", seen(1000))}, 0, 1001},
		{"seen_seq below issued", []workers.Report{rep("w1", seen(0)), rep("w1", seen(1))}, 3, 4},
		{"seen_seq ahead of issued", []workers.Report{rep("w1", seen(0)), rep("w1", seen(50))}, 3, 51},
		{"restart with lower seen_seq keeps going up", []workers.Report{rep("w1", seen(40)), rep("w1", seen(5))}, 2, 43},
		{"instance change keeps going up", []workers.Report{rep("w1", seen(40), instance("a")), rep("w1", instance("b"))}, 2, 43},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := workers.New()
			w, _ := mustApply(t, g, 0, tt.reports[0])
			for range tt.books {
				g.Book(0, w, 0, 1)
			}
			for _, r := range tt.reports[1:] {
				mustApply(t, g, 0, r)
			}
			if got := g.Book(0, w, 0, 1); got != tt.want {
				t.Errorf("next Book: got seq %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRestartDropsBookings(t *testing.T) {
	tests := []struct {
		name        string
		second      workers.Report
		wantDropped int
		wantLeft    int
	}{
		{"same instance, same seen_seq", rep("w1", instance("a"), seen(10)), 0, 3},
		{"same instance, higher seen_seq", rep("w1", instance("a"), seen(11)), 1, 2},
		{"instance change", rep("w1", instance("b"), seen(10)), 3, 0},
		{"instance change, higher seen_seq", rep("w1", instance("b"), seen(12)), 3, 0},
		{"instance cleared", rep("w1", seen(10)), 3, 0},
		{"seen_seq lower than previous", rep("w1", instance("a"), seen(9)), 3, 0},
		{"seen_seq 0 after 10", rep("w1", instance("a"), seen(0)), 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := workers.New()
			first := rep("w1", instance("a"), seen(10))
			// Another instance takes the id over only from a draining holder
			// (or once the holder is silent for its TTL: TestInstanceTakeover).
			first.Draining = tt.second.Instance != "a"
			w, _ := mustApply(t, g, 0, first)
			for range 3 {
				g.Book(0, w, 0, 100) // seqs 11, 12, 13
			}
			_, ch := mustApply(t, g, ms, tt.second)
			if ch.Dropped != tt.wantDropped {
				t.Errorf("Change.Dropped: got %d, want %d", ch.Dropped, tt.wantDropped)
			}
			if got := w.Bookings(); got != tt.wantLeft {
				t.Errorf("Bookings: got %d, want %d", got, tt.wantLeft)
			}
			if got, want := w.Rank(0).Booked, uint64(100*tt.wantLeft); got != want {
				t.Errorf("Booked: got %d, want %d", got, want)
			}
			if w.Instance != tt.second.Instance {
				t.Errorf("Instance: got %q, want %q", w.Instance, tt.second.Instance)
			}
		})
	}
}

// TestRestartThenNormal checks that after a restart with a lower seen_seq, the
// lower value becomes the reference for the next report.
func TestRestartThenNormal(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", seen(10)))
	mustApply(t, g, 0, rep("w1", seen(2))) // restart
	s := g.Book(0, w, 0, 5)                // 11
	_, ch := mustApply(t, g, 0, rep("w1", seen(3)))
	if ch.Dropped != 0 || w.Bookings() != 1 {
		t.Errorf("report seen_seq 3 after restart at 2: got Dropped %d Bookings %d, want 0 1", ch.Dropped, w.Bookings())
	}
	_, ch = mustApply(t, g, 0, rep("w1", seen(s)))
	if ch.Dropped != 1 || w.Bookings() != 0 {
		t.Errorf("report seen_seq %d: got Dropped %d Bookings %d, want 1 0", s, ch.Dropped, w.Bookings())
	}
}

func TestBookingAgeLimit(t *testing.T) {
	const ttlMs = 1000
	ttlNs := int64(ttlMs) * ms
	tests := []struct {
		name     string
		bookedAt []int64 // ns
		now      int64
		want     int // bookings left
	}{
		{"all young", []int64{0, 10 * ms}, ttlNs, 2},
		{"exactly ttl old is kept", []int64{0}, ttlNs, 1},
		{"one ns past ttl is dropped", []int64{0}, ttlNs + 1, 0},
		{"oldest dropped, young kept", []int64{0, 500 * ms, 900 * ms}, ttlNs + 600*ms, 1},
	}
	for _, tt := range tests {
		for _, via := range []string{"Apply", "Expire"} {
			t.Run(tt.name+"/"+via, func(t *testing.T) {
				g := workers.New()
				w, _ := mustApply(t, g, 0, rep("w1", ttl(ttlMs), seen(0)))
				for _, at := range tt.bookedAt {
					g.Book(at, w, 0, 7)
				}
				switch via {
				case "Apply":
					_, ch := mustApply(t, g, tt.now, rep("w1", ttl(ttlMs), seen(0)))
					if want := len(tt.bookedAt) - tt.want; ch.Dropped != want {
						t.Errorf("Change.Dropped: got %d, want %d", ch.Dropped, want)
					}
				case "Expire":
					// Keep the worker itself alive: its TTL counts from LastReport.
					mustApply(t, g, tt.now-1, rep("w1", ttl(ttlMs), seen(0)))
					// That report dropped what was old at now-1; expire the rest at now.
					if gone := g.Expire(tt.now, nil); len(gone) != 0 {
						t.Fatalf("Expire: got %d workers removed, want 0", len(gone))
					}
				}
				if got := w.Bookings(); got != tt.want {
					t.Errorf("Bookings: got %d, want %d", got, tt.want)
				}
				if got, want := w.Rank(0).Booked, uint64(7*tt.want); got != want {
					t.Errorf("Booked: got %d, want %d", got, want)
				}
				if got, want := w.Rank(0).BookedRequests, uint64(tt.want); got != want {
					t.Errorf("BookedRequests: got %d, want %d", got, want)
				}
			})
		}
	}
}

// TestExpireDropsOldBookings books without any report in between, so only
// Expire can drop the booking.
func TestExpireDropsOldBookings(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", ttl(1000), seen(0)))
	g.Book(100*ms, w, 0, 5)
	g.Book(900*ms, w, 0, 6)
	// Worker TTL: live until 1000 ms. Booking 1 is older than ttl after 1100 ms.
	if gone := g.Expire(1000*ms, nil); len(gone) != 0 || w.Bookings() != 2 {
		t.Fatalf("Expire at 1000ms: got %d removed, %d bookings, want 0 2", len(gone), w.Bookings())
	}
	// Refresh liveness with a report that counts nothing (seen_seq 0).
	mustApply(t, g, 1000*ms, rep("w1", ttl(1000), seen(0)))
	if gone := g.Expire(1100*ms+1, nil); len(gone) != 0 {
		t.Fatalf("Expire: got %d removed, want 0", len(gone))
	}
	if got := w.Bookings(); got != 1 {
		t.Errorf("Bookings: got %d, want 1", got)
	}
	if got := w.Rank(0).Booked; got != 6 {
		t.Errorf("Booked: got %d, want 6", got)
	}
}

func TestUnbook(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", dp(0, 2), seen(0)))
	s1 := g.Book(0, w, 0, 10)
	s2 := g.Book(0, w, 1, 20)
	s3 := g.Book(0, w, 0, 30)
	tests := []struct {
		seq              uint64
		want             bool
		wantR0, wantR1   uint64 // booked tokens after
		wantReq0, wantN1 uint64 // booked requests after
	}{
		{s2, true, 40, 0, 2, 0},
		{s2, false, 40, 0, 2, 0}, // already released
		{99, false, 40, 0, 2, 0}, // never issued
		{0, false, 40, 0, 2, 0},
		{s1, true, 30, 0, 1, 0},
		{s3, true, 0, 0, 0, 0},
	}
	for i, tt := range tests {
		if got := g.Unbook(w, tt.seq); got != tt.want {
			t.Errorf("step %d Unbook(%d): got %v, want %v", i, tt.seq, got, tt.want)
		}
		r0, r1 := w.Rank(0), w.Rank(1)
		if r0.Booked != tt.wantR0 || r1.Booked != tt.wantR1 || r0.BookedRequests != tt.wantReq0 || r1.BookedRequests != tt.wantN1 {
			t.Errorf("step %d: got booked %d/%d requests %d/%d, want %d/%d %d/%d", i,
				r0.Booked, r1.Booked, r0.BookedRequests, r1.BookedRequests, tt.wantR0, tt.wantR1, tt.wantReq0, tt.wantN1)
		}
	}
	if got := w.Bookings(); got != 0 {
		t.Errorf("Bookings: got %d, want 0", got)
	}
	// Releasing does not reuse sequence numbers.
	if got, want := g.Book(0, w, 0, 1), s3+1; got != want {
		t.Errorf("Book after Unbook: got seq %d, want %d", got, want)
	}
}

func TestExpire(t *testing.T) {
	tests := []struct {
		name     string
		ttlMs    uint64
		lastAt   int64
		now      int64
		wantLive bool
	}{
		{"fresh", 1000, 0, 0, true},
		{"just before ttl", 1000, 0, 1000*ms - 1, true},
		{"exactly at ttl", 1000, 0, 1000 * ms, true},
		{"one ns after ttl", 1000, 0, 1000*ms + 1, false},
		{"long after", 100, 5 * ms, 1000 * ms, false},
		{"refreshed by a later report", 100, 900 * ms, 1000 * ms, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := workers.New()
			mustApply(t, g, 0, rep("w1", ttl(tt.ttlMs)))
			if tt.lastAt != 0 {
				mustApply(t, g, tt.lastAt, rep("w1", ttl(tt.ttlMs)))
			}
			gone := g.Expire(tt.now, nil)
			live := g.Get("w1") != nil
			if live != tt.wantLive {
				t.Errorf("live after Expire: got %v, want %v", live, tt.wantLive)
			}
			if want := b2i(!tt.wantLive); len(gone) != want {
				t.Errorf("Expire returned %d workers, want %d", len(gone), want)
			}
			if want := b2i(tt.wantLive); g.Len() != want || len(g.All()) != want {
				t.Errorf("Len/All: got %d/%d, want %d", g.Len(), len(g.All()), want)
			}
		})
	}
}

func TestExpireMany(t *testing.T) {
	g := workers.New()
	// Different TTLs: a (100ms), b (1000ms), c (200ms), d (1000ms).
	for _, w := range []struct {
		id  string
		ttl uint64
	}{{"a", 100}, {"b", 1000}, {"c", 200}, {"d", 1000}} {
		mustApply(t, g, 0, rep(w.id, ttl(w.ttl)))
	}
	dst := []*workers.Worker{nil} // Expire appends
	dst = g.Expire(150*ms, dst)
	if len(dst) != 2 || dst[1].ID != "a" {
		t.Fatalf("Expire at 150ms: got %v, want [nil a]", ids(dst))
	}
	dst = g.Expire(250*ms, dst[:0])
	if got := ids(dst); !slices.Equal(got, []string{"c"}) {
		t.Errorf("Expire at 250ms: got %v, want [c]", got)
	}
	if got := ids(g.All()); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("All: got %v, want [b d]", got)
	}
	// A removed worker comes back as new, with fresh state.
	w, ch := mustApply(t, g, 300*ms, rep("a"))
	if !ch.New {
		t.Errorf("Change.New for a returning worker: got false, want true")
	}
	if got := ids(g.All()); !slices.Equal(got, []string{"a", "b", "d"}) {
		t.Errorf("All: got %v, want [a b d]", got)
	}
	if got := g.Book(0, w, 0, 1); got != 1 {
		t.Errorf("Book for a returning worker: got seq %d, want 1", got)
	}
}

func TestPauseResume(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", ttl(1000), seen(0)))
	g.Book(500*ms, w, 0, 9)
	g.Pause()
	g.Pause() // idempotent
	if gone := g.Expire(10_000*ms, nil); len(gone) != 0 || g.Len() != 1 {
		t.Fatalf("Expire while paused: got %d removed, Len %d, want 0 1", len(gone), g.Len())
	}
	if got := w.Bookings(); got != 1 {
		t.Fatalf("Bookings while paused: got %d, want 1 (no clock runs)", got)
	}
	g.Resume(20_000 * ms)
	if got := w.LastReport; got != 20_000*ms {
		t.Errorf("LastReport after Resume: got %d, want %d", got, 20_000*ms)
	}
	// The clocks restart from the resume: live and booked until exactly ttl after it.
	if gone := g.Expire(21_000*ms, nil); len(gone) != 0 || w.Bookings() != 1 {
		t.Errorf("Expire at resume+ttl: got %d removed, %d bookings, want 0 1", len(gone), w.Bookings())
	}
	if gone := g.Expire(21_000*ms+1, nil); len(gone) != 1 {
		t.Errorf("Expire past resume+ttl: got %d removed, want 1", len(gone))
	}
	// Resume without Pause changes nothing.
	g2 := workers.New()
	w2, _ := mustApply(t, g2, 5*ms, rep("w2"))
	g2.Resume(99 * ms)
	if w2.LastReport != 5*ms {
		t.Errorf("Resume when not paused: got LastReport %d, want %d", w2.LastReport, 5*ms)
	}
}

func TestMaxWorkers(t *testing.T) {
	g := workers.New()
	g.MaxWorkers = 2
	mustApply(t, g, 0, rep("a"))
	mustApply(t, g, 0, rep("b"))
	w, ch, ok := g.Apply(0, rep("c"))
	if ok || w != nil || ch.New {
		t.Errorf("Apply(c) beyond cap: got (%v, %+v, %v), want (nil, {}, false)", w, ch, ok)
	}
	if g.Get("c") != nil || g.Len() != 2 {
		t.Errorf("after refusal: got Get(c)=%v Len=%d, want nil 2", g.Get("c"), g.Len())
	}
	if _, _, ok := g.Apply(ms, rep("a", func(r *workers.Report) { r.Draining = true })); !ok {
		t.Errorf("Apply(a) of an existing worker at the cap: got refused, want applied")
	}
	g.Expire(4000*ms, nil) // both gone
	if _, _, ok := g.Apply(4000*ms, rep("c")); !ok {
		t.Errorf("Apply(c) after expiry freed room: got refused, want applied")
	}
}

func TestReshape(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", dp(0, 2), seen(0),
		ranks(workers.RankLoad{Rank: 1, ActivePrefillTokens: 50})))
	g.Book(0, w, 0, 10)
	g.Book(0, w, 1, 10)
	w.Ranks[1].Latch = true
	tests := []struct {
		name        string
		r           workers.Report
		wantStart   uint32
		wantRanks   int
		wantDropped int
	}{
		{"same shape keeps bookings", rep("w1", dp(0, 2), seen(0)), 0, 2, 0},
		{"grow", rep("w1", dp(0, 4), seen(0), ranks(workers.RankLoad{Rank: 3, ActivePrefillTokens: 7})), 0, 4, 2},
		{"shift", rep("w1", dp(8, 4), seen(0)), 8, 4, 0},
		{"shrink", rep("w1", dp(8, 1), seen(0)), 8, 1, 0},
	}
	for _, tt := range tests {
		_, ch := mustApply(t, g, 0, tt.r)
		if w.Start != tt.wantStart || len(w.Ranks) != tt.wantRanks {
			t.Errorf("%s: got ranks [%d, +%d), want [%d, +%d)", tt.name, w.Start, len(w.Ranks), tt.wantStart, tt.wantRanks)
		}
		if ch.Dropped != tt.wantDropped {
			t.Errorf("%s: Change.Dropped: got %d, want %d", tt.name, ch.Dropped, tt.wantDropped)
		}
		for i := range w.Ranks {
			rk := &w.Ranks[i]
			if got, want := rk.Reported.Rank, w.Start+uint32(i); got != want {
				t.Errorf("%s: Ranks[%d].Reported.Rank: got %d, want %d", tt.name, i, got, want)
			}
		}
	}
	// After "grow", rank 3 had load 7 and the old bookings were gone.
	g2 := workers.New()
	w2, _ := mustApply(t, g2, 0, rep("w", dp(0, 1), seen(0)))
	g2.Book(0, w2, 0, 10)
	mustApply(t, g2, 0, rep("w", dp(0, 4), seen(0), ranks(workers.RankLoad{Rank: 3, ActivePrefillTokens: 7})))
	if got := w2.Rank(3).Load().ActivePrefillTokens; got != 7 {
		t.Errorf("rank 3 after grow: got %d, want 7", got)
	}
	if got := w2.Rank(0).Load().ActivePrefillTokens; got != 0 {
		t.Errorf("rank 0 after grow: got %d, want 0 (bookings dropped, missing rank zero)", got)
	}
	if w2.Rank(0).Latch {
		t.Errorf("rank 0 Latch after reshape: got true, want false")
	}
	// Bookings and sequence numbers keep working on the new shape.
	if got := g2.Book(0, w2, 3, 4); got != 2 {
		t.Errorf("Book after reshape: got seq %d, want 2", got)
	}
	if got := w2.Rank(3).Load().ActivePrefillTokens; got != 11 {
		t.Errorf("rank 3 after Book: got %d, want 11", got)
	}
}

func TestReportReplacesLoadAndState(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", dp(0, 2), func(r *workers.Report) {
		r.Taints, r.Draining, r.MaxBatched, r.TotalKV = []string{"a"}, true, 10, 20
	}, ranks(workers.RankLoad{Rank: 0, ActivePrefillTokens: 5}, workers.RankLoad{Rank: 1, ActiveDecodeBlocks: 6})))
	w.Ranks[0].Latch = true
	w.Excluded = true
	mustApply(t, g, ms, rep("w1", dp(0, 2), func(r *workers.Report) {
		r.Taints = []string{"c", "b"}
	}, ranks(workers.RankLoad{Rank: 1, KVUsedBlocks: 3})))
	if w.Excluded {
		t.Errorf("Excluded after a report: got true, want false")
	}
	if w.Draining || w.MaxBatched != 0 || w.TotalKV != 0 {
		t.Errorf("state: got Draining %v MaxBatched %d TotalKV %d, want false 0 0", w.Draining, w.MaxBatched, w.TotalKV)
	}
	if want := []string{"b", "c"}; !slices.Equal(w.Taints, want) {
		t.Errorf("Taints: got %v, want %v", w.Taints, want)
	}
	if got := w.Rank(0).Load(); got != (workers.Load{}) {
		t.Errorf("rank 0 missing from the report: got %+v, want zero load", got)
	}
	if got, want := w.Rank(1).Load(), (workers.Load{KVUsedBlocks: 3}); got != want {
		t.Errorf("rank 1: got %+v, want %+v", got, want)
	}
	if !w.Ranks[0].Latch {
		t.Errorf("Latch: got cleared by Apply, want left to package filters")
	}
	// Taints removed entirely.
	mustApply(t, g, 2*ms, rep("w1", dp(0, 2)))
	if len(w.Taints) != 0 || w.HasTaint("b") {
		t.Errorf("Taints after a report without taints: got %v, want none", w.Taints)
	}
	// The report's taint slice is not aliased.
	in := []string{"x", "y"}
	mustApply(t, g, 3*ms, rep("w1", dp(0, 2), func(r *workers.Report) { r.Taints = in }))
	in[0] = "zzz"
	if !w.HasTaint("x") {
		t.Errorf("Taints alias the report's slice: got %v after the caller changed it", w.Taints)
	}
}

func TestLoadSaturates(t *testing.T) {
	g := workers.New()
	const max = ^uint64(0)
	w, _ := mustApply(t, g, 0, rep("w1", seen(0), ranks(workers.RankLoad{Rank: 0, ActivePrefillTokens: max - 5, ActiveRequests: max})))
	g.Book(0, w, 0, 10)
	l := w.Rank(0).Load()
	if l.ActivePrefillTokens != max || l.ActiveRequests != max {
		t.Errorf("Load: got %d %d, want saturated %d %d", l.ActivePrefillTokens, l.ActiveRequests, max, max)
	}
	g.Book(0, w, 0, max)
	if got := w.Rank(0).Booked; got != max {
		t.Errorf("Booked after overflowing bookings: got %d, want %d", got, max)
	}
	// A report triggers a rebook, which saturates too.
	mustApply(t, g, 0, rep("w1", seen(0)))
	if got := w.Rank(0).Booked; got != max {
		t.Errorf("Booked after rebook: got %d, want %d", got, max)
	}
}

func ids(ws []*workers.Worker) []string {
	var s []string
	for _, w := range ws {
		if w == nil {
			s = append(s, "nil")
			continue
		}
		s = append(s, w.ID)
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestExpiredWorkerComesBackAboveItsOldSeq(t *testing.T) {
	g := workers.New()
	w, _, _ := g.Apply(0, workers.Report{WorkerID: "w", DPSize: 1, TTLms: 100})
	for range 5 {
		g.Book(0, w, 0, 1)
	}
	g.Expire(200e6, nil)
	w, _, _ = g.Apply(300e6, workers.Report{WorkerID: "w", DPSize: 1, TTLms: 100, SeenSeq: 2, HasSeenSeq: true})
	if got := g.Book(300e6, w, 0, 1); got != 6 {
		t.Fatalf("first seq after coming back = %d, want 6 (above every seq issued before)", got)
	}
}

func TestExpireListsAgedWorkers(t *testing.T) {
	g := workers.New()
	w, _, _ := g.Apply(0, workers.Report{WorkerID: "w", DPSize: 1, TTLms: 1000})
	g.Book(0, w, 0, 7)
	g.Apply(900e6, workers.Report{WorkerID: "w", DPSize: 1, TTLms: 1000, SeenSeq: 0, HasSeenSeq: true})
	g.Expire(1100e6, nil)
	if len(g.Aged()) != 1 || w.Ranks[0].Booked != 0 {
		t.Fatalf("Aged = %d, booked %d; want 1 worker and 0 booked", len(g.Aged()), w.Ranks[0].Booked)
	}
}

// TestInstanceRival: while the instance holding an id is live and not
// draining, reports from another instance are dropped (Rival) and change
// nothing; once both have reported within the TTL, the holder after the
// other one appeared, every report of either says Conflict with both names.
func TestInstanceRival(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", instance("a"), seen(0), ranks(workers.RankLoad{Rank: 0, ActiveRequests: 1})))
	g.Book(0, w, 0, 100) // seq 1

	_, ch := mustApply(t, g, 10*ms, rep("w1", instance("b"), seen(0), ranks(workers.RankLoad{Rank: 0, ActiveRequests: 7})))
	if !ch.Rival || ch.Conflict || ch.Owner != "a" || ch.Other != "b" {
		t.Fatalf("first report of b: got %+v, want Rival without Conflict, owner a, other b", ch)
	}
	if w.Instance != "a" || w.Bookings() != 1 || w.Rank(0).Reported.ActiveRequests != 1 || w.LastReport != 0 {
		t.Fatalf("after b's report: instance %q, %d bookings, active %d, last report %d; want a, 1, 1, 0 (nothing applied)",
			w.Instance, w.Bookings(), w.Rank(0).Reported.ActiveRequests, w.LastReport)
	}
	// The holder reports again: two live instances.
	_, ch = mustApply(t, g, 20*ms, rep("w1", instance("a"), seen(1)))
	if ch.Rival || !ch.Conflict || ch.Owner != "a" || ch.Other != "b" {
		t.Fatalf("a after b: got %+v, want Conflict (not Rival), owner a, other b", ch)
	}
	_, ch = mustApply(t, g, 30*ms, rep("w1", instance("b"), seen(0)))
	if !ch.Rival || !ch.Conflict {
		t.Fatalf("b after the conflict: got %+v, want Rival and Conflict", ch)
	}
	// b falls silent: once its last report is older than the TTL, a's reports are plain again.
	_, ch = mustApply(t, g, 30*ms+int64(workers.DefaultTTL)*ms+1, rep("w1", instance("a"), seen(1)))
	if ch.Rival || ch.Conflict {
		t.Fatalf("a after b's silence: got %+v, want neither Rival nor Conflict", ch)
	}
}

// TestInstanceTakeover: a restart under a new instance takes the id over
// once the holder has been silent for its TTL, or at once when the holder's
// last report said draining; it is never a conflict.
func TestInstanceTakeover(t *testing.T) {
	t.Run("silent holder", func(t *testing.T) {
		g := workers.New()
		w, _ := mustApply(t, g, 0, rep("w1", instance("a"), ttl(500), seen(0)))
		g.Book(0, w, 0, 100)
		if _, ch := mustApply(t, g, 500*ms, rep("w1", instance("b"), seen(0))); !ch.Rival || ch.Conflict {
			t.Fatalf("b at exactly the TTL: got %+v, want Rival (a is still live), no Conflict", ch)
		}
		_, ch := mustApply(t, g, 500*ms+1, rep("w1", instance("b"), seen(0)))
		if ch.Rival || ch.Conflict || ch.Dropped != 1 || w.Instance != "b" {
			t.Fatalf("b after the TTL: got %+v, instance %q; want a restart dropping 1 booking, instance b", ch, w.Instance)
		}
		// The old holder coming back is now the rival.
		if _, ch := mustApply(t, g, 600*ms, rep("w1", instance("a"), seen(0))); !ch.Rival || ch.Owner != "b" {
			t.Fatalf("a after the takeover: got %+v, want Rival, owner b", ch)
		}
	})
	t.Run("draining holder", func(t *testing.T) {
		g := workers.New()
		w, _ := mustApply(t, g, 0, rep("w1", instance("a"), seen(0), func(r *workers.Report) { r.Draining = true }))
		g.Book(0, w, 0, 100)
		_, ch := mustApply(t, g, ms, rep("w1", instance("b"), seen(0)))
		if ch.Rival || ch.Conflict || ch.Dropped != 1 || w.Instance != "b" || w.Draining {
			t.Fatalf("b after a drained: got %+v, instance %q, draining %v; want a restart, instance b, not draining", ch, w.Instance, w.Draining)
		}
	})
}

// TestCapacityFull: a rank is full when its reported plus booked requests
// reach max_active_requests; without the field it never is.
func TestCapacityFull(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", seen(0), func(r *workers.Report) { r.MaxActive = 2 },
		ranks(workers.RankLoad{Rank: 0, ActiveRequests: 1})))
	if w.Full(w.Rank(0)) {
		t.Fatalf("1 of 2 active: got full")
	}
	seq := g.Book(0, w, 0, 10)
	if !w.Full(w.Rank(0)) {
		t.Fatalf("1 reported + 1 booked of 2: got not full")
	}
	g.Unbook(w, seq)
	if w.Full(w.Rank(0)) {
		t.Fatalf("after Unbook: got full")
	}
	mustApply(t, g, ms, rep("w1", seen(1), ranks(workers.RankLoad{Rank: 0, ActiveRequests: 5})))
	if w.Full(w.Rank(0)) || w.MaxActive != 0 {
		t.Fatalf("report without max_active_requests: got full %v, MaxActive %d; want no capacity", w.Full(w.Rank(0)), w.MaxActive)
	}
}

// TestRefusalBackoff: a worker refusing every probe is excluded for 10 ms,
// 20 ms, 40 ms ... up to 1 s; reports do not end an exclusion early; a probe
// keeps it excluded until answered; refusals of dispatches sent before the
// exclusion began add nothing; an acceptance resets it all.
func TestRefusalBackoff(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", seen(0), ttl(600000)))
	// A burst of three dispatches, all refused.
	var burst []uint64
	for range 3 {
		burst = append(burst, g.Book(0, w, 0, 1))
	}
	if w.Excluded {
		t.Fatalf("excluded before any refusal")
	}
	now := int64(0)
	for _, seq := range burst {
		g.Unbook(w, seq)
		g.Refused(now, w, seq)
	}
	if w.Refusals() != 1 || !w.Excluded || w.ExcludedUntil != 10*ms {
		t.Fatalf("after a refused burst: refusals %d, excluded %v until %d; want 1, true, %d", w.Refusals(), w.Excluded, w.ExcludedUntil, 10*ms)
	}
	// A report does not end it.
	mustApply(t, g, 5*ms, rep("w1", seen(3), ttl(600000)))
	if !w.Excluded {
		t.Fatalf("a report ended the exclusion early")
	}
	want := []int64{20, 40, 80, 160, 320, 640, 1000, 1000, 1000}
	for i, d := range want {
		until := w.ExcludedUntil
		if g.Expire(until-1, nil); !w.Excluded {
			t.Fatalf("probe %d: exclusion ended 1 ns early", i)
		}
		g.Expire(until, nil)
		if w.Excluded || len(g.Aged()) != 1 {
			t.Fatalf("probe %d: exclusion not ended at %d (aged %d)", i, until, len(g.Aged()))
		}
		now = until
		seq := g.Book(now, w, 0, 1)
		if !w.Excluded {
			t.Fatalf("probe %d: not excluded while the probe is unanswered", i)
		}
		g.Expire(now+10*MaxExclusionMs*ms, nil)
		mustApply(t, g, now+1, rep("w1", seen(seq-1), ttl(600000)))
		if !w.Excluded {
			t.Fatalf("probe %d: the exclusion of an unanswered probe ended", i)
		}
		now += 3 * ms
		g.Unbook(w, seq)
		g.Refused(now, w, seq)
		if got := w.ExcludedUntil - now; got != d*ms {
			t.Fatalf("probe %d refused: excluded for %d ms, want %d", i, got/ms, d)
		}
	}
	// A late refusal from the old burst changes nothing.
	until := w.ExcludedUntil
	g.Refused(now+ms, w, burst[0])
	if w.ExcludedUntil != until || w.Refusals() != len(want)+1 {
		t.Fatalf("late burst refusal: until %d refusals %d, want %d and %d", w.ExcludedUntil, w.Refusals(), until, len(want)+1)
	}
	// An acceptance resets everything.
	if !g.Accepted(w) || w.Excluded || w.Refusals() != 0 {
		t.Fatalf("after an acceptance: excluded %v refusals %d, want false 0", w.Excluded, w.Refusals())
	}
	seq := g.Book(now, w, 0, 1)
	if w.Excluded {
		t.Fatalf("a dispatch after an acceptance is a probe")
	}
	g.Refused(now, w, seq)
	if w.ExcludedUntil-now != 10*ms {
		t.Fatalf("first refusal after an acceptance: excluded for %d ms, want 10", (w.ExcludedUntil-now)/ms)
	}
}

const MaxExclusionMs = workers.MaxExclusion / 1e6

// TestUnsentProbe: a probe that never reached the worker (the request's or
// the connection's fault) releases its booking and ends the wait for its
// answer, which will never come; the next offer is the probe again. Before,
// the worker stayed excluded for good. A dispatch that was not a probe
// changes no exclusion.
func TestUnsentProbe(t *testing.T) {
	g := workers.New()
	w, _ := mustApply(t, g, 0, rep("w1", seen(0), ttl(600000)))
	first := g.Book(0, w, 0, 1)
	g.Unbook(w, first)
	g.Refused(0, w, first)
	g.Expire(10*ms, nil) // the 10 ms exclusion ends
	probe := g.Book(10*ms, w, 0, 5)
	if !w.Excluded {
		t.Fatal("not excluded while the probe is unanswered")
	}
	if !g.Unsent(w, probe) || w.Excluded || w.Bookings() != 0 || w.Refusals() != 1 {
		t.Fatalf("after the unsent probe: excluded %v, bookings %d, refusals %d; want false, 0, 1 (kept)", w.Excluded, w.Bookings(), w.Refusals())
	}
	again := g.Book(11*ms, w, 0, 5)
	if !w.Excluded {
		t.Fatal("the next offer after an unsent probe is not a probe")
	}
	g.Unbook(w, again)
	g.Refused(12*ms, w, again)
	if got := w.ExcludedUntil - 12*ms; got != 20*ms {
		t.Fatalf("the refused second probe excludes for %d ms, want 20 (the unsent one counted nothing)", got/ms)
	}
	// An unsent dispatch while excluded for a time (not awaiting a probe)
	// leaves the exclusion alone.
	if g.Unsent(w, 999) || !w.Excluded {
		t.Fatalf("an unknown unsent dispatch ended a timed exclusion")
	}
}
