package scheduler

import (
	"testing"

	"fairdispatch/filters"
	"fairdispatch/workers"
)

// TestRefusingWorkerOffersBounded simulates ten seconds: a request arrives
// every millisecond; worker "bad" refuses every offer, answering after 1 ms,
// and reports every 20 ms; worker "good" accepts everything. Once bad has
// refused in a row it has at most one offer in flight, and its exclusions
// grow from 10 ms to 1 s: at most 8 offers (7 probes and the first burst's)
// before 1.3 s after its first refusal, and from the 9th offer on, one per second at most.
func TestRefusingWorkerOffersBounded(t *testing.T) {
	f := newFixture(t, twoClasses, filters.Thresholds{})
	const ms = int64(1e6)
	start := f.now
	var badOffers []int64 // times
	var badSeen, goodSeen uint64
	type pending struct {
		at  int64
		d   Decision
		bad bool
	}
	var inFlight []pending
	handle := func(d Decision) {
		if d.Kind != Dispatch {
			return
		}
		if d.Worker == "bad" {
			badOffers = append(badOffers, f.now)
			badSeen = max(badSeen, d.Seq)
			inFlight = append(inFlight, pending{f.now + ms, d, true})
			return
		}
		goodSeen = max(goodSeen, d.Seq)
		inFlight = append(inFlight, pending{f.now + ms, d, false})
	}
	report := func(id string, seen uint64) {
		f.report(id, 0, func(r *workers.Report) { r.SeenSeq, r.HasSeenSeq = seen, true })
	}
	report("bad", 0)
	report("good", 0)
	for step := int64(0); step < 10_000; step++ {
		f.now = start + step*ms
		kept := inFlight[:0]
		for _, p := range inFlight {
			switch {
			case p.at > f.now:
				kept = append(kept, p)
			case p.bad:
				f.s.Return(f.now, p.d.Req, p.d.Worker, p.d.Seq)
			default:
				f.s.Accepted(p.d.Worker) // and finished at once
			}
		}
		inFlight = kept
		if step%20 == 0 {
			report("bad", badSeen)
			report("good", goodSeen)
		}
		if step%25 == 0 {
			f.s.Tick(f.now, nil)
		}
		handle(f.arrive("premium", 10))
		for d := f.s.Next(f.now); d.Kind != None; d = f.s.Next(f.now) {
			handle(d)
		}
	}
	if len(badOffers) < 10 {
		t.Fatalf("bad got %d offers in 10 s, want at least 10 (it keeps being probed)", len(badOffers))
	}
	first := badOffers[0]
	early := 0
	for _, at := range badOffers {
		if at < first+1300*ms {
			early++
		}
	}
	if early > 8 {
		t.Errorf("%d offers to bad in its first 1.3 s, want at most 8", early)
	}
	for i := 8; i < len(badOffers); i++ {
		if gap := badOffers[i] - badOffers[i-1]; gap < workers.MaxExclusion {
			t.Errorf("offers %d and %d to bad %d ms apart, want at least 1 s", i-1, i, gap/ms)
		}
	}
	t.Logf("bad: %d offers in 10 s, %d in its first 1.3 s", len(badOffers), early)
}
