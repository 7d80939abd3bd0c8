package dispatcher

import (
	"math"
	"time"

	"fairdispatch/metrics"
	"fairdispatch/scheduler"
)

// View is the immutable snapshot of the actor's state that the admin API
// serves at /debug/queues. The actor publishes a new one about every second.
type View struct {
	At        time.Time              `json:"at"`
	Connected bool                   `json:"connected"`
	Grace     bool                   `json:"startup_grace"`
	Held      int                    `json:"held"`
	InFlight  int                    `json:"in_flight"`
	Classes   []scheduler.ClassStats `json:"classes"`
	Workers   []WorkerView           `json:"workers"`

	// NoLiveWorkers is true during a fleet outage (docs/design.md, Fleet
	// outage), which began at OutageSince.
	NoLiveWorkers bool       `json:"no_live_workers"`
	OutageSince   *time.Time `json:"outage_since,omitempty"`
}

// WorkerView is one live worker in a View.
type WorkerView struct {
	ID         string     `json:"worker_id"`
	Instance   string     `json:"instance"`
	Draining   bool       `json:"draining"`
	Excluded   bool       `json:"excluded"`
	Refusals   int        `json:"refusals"`            // refused probes in a row
	MaxActive  uint64     `json:"max_active_requests"` // per rank; 0: no capacity`
	Overloaded bool       `json:"overloaded"`
	Bookings   int        `json:"bookings"`
	Ranks      []RankView `json:"ranks"`
}

// RankView is one rank's load: as reported, as booked since, and the sum.
type RankView struct {
	Rank            int32  `json:"dp_rank"`
	ReportedPrefill uint64 `json:"reported_prefill_tokens"`
	BookedPrefill   uint64 `json:"booked_prefill_tokens"`
	Prefill         uint64 `json:"active_prefill_tokens"`
	DecodeBlocks    uint64 `json:"active_decode_blocks"`
	KVUsedBlocks    uint64 `json:"kv_used_blocks"`
	ActiveRequests  uint64 `json:"active_requests"`
	DecodeLatch     bool   `json:"decode_latch"`
}

// View returns the last published snapshot.
func (a *Actor) View() *View { return a.view.Load() }

// publishView builds a new View and updates the gauges from it.
func (a *Actor) publishView(now time.Time) {
	s := a.d.Scheduler
	v := &View{At: now, Connected: a.connected, Grace: s.InGrace(now.UnixNano()), Held: len(a.held), InFlight: a.inFlight}
	if a.out {
		since := time.Unix(0, a.outSince)
		v.NoLiveWorkers, v.OutageSince = true, &since
	}
	v.Classes = s.Stats(nil)
	s.KeyFairness(now.UnixNano(), v.Classes)
	v.Workers = make([]WorkerView, 0, s.Workers().Len()) // [] when none is live, never null
	for _, w := range s.Workers().All() {
		wv := WorkerView{ID: w.ID, Instance: w.Instance, Draining: w.Draining, Excluded: w.Excluded,
			Refusals: w.Refusals(), MaxActive: w.MaxActive, Overloaded: s.Overloaded(w), Bookings: w.Bookings()}
		for i := range w.Ranks {
			rk := &w.Ranks[i]
			l := rk.Load()
			wv.Ranks = append(wv.Ranks, RankView{
				Rank: int32(w.Start) + int32(i), ReportedPrefill: rk.Reported.ActivePrefillTokens, BookedPrefill: rk.Booked,
				Prefill: l.ActivePrefillTokens, DecodeBlocks: l.ActiveDecodeBlocks, KVUsedBlocks: l.KVUsedBlocks,
				ActiveRequests: l.ActiveRequests, DecodeLatch: rk.Latch,
			})
		}
		v.Workers = append(v.Workers, wv)
	}
	a.view.Store(v)

	m := a.d.Metrics
	for k, c := range v.Classes {
		m.SetClass(k, metrics.ClassState{Requests: uint64(c.Pending), ISLTokens: c.ISLTokens, CachedTokens: c.CachedTokens, Deficit: c.Deficit, Keys: c.Keys})
		m.SetKeyFairness(k, keyFairness(c.KeyFairness))
	}
	a.workerLoads = a.workerLoads[:0]
	for _, w := range v.Workers {
		wl := metrics.WorkerLoad{ID: w.ID, Overloaded: w.Overloaded}
		for _, r := range w.Ranks {
			wl.BookedPrefill += r.BookedPrefill
			wl.ReportedPrefill += r.ReportedPrefill
		}
		a.workerLoads = append(a.workerLoads, wl)
	}
	m.SetWorkers(a.workerLoads)
	m.SetHeld(v.Held)
	m.SetGraceOver(!v.Grace)
}

// keyFairness converts a class's key fairness for the gauges: NaN for what was
// not measured.
func keyFairness(f *scheduler.KeyFairness) metrics.KeyFairness {
	val := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	if f == nil {
		return metrics.KeyFairness{Jain: math.NaN(), MaxShareOverWeight: math.NaN(), MinShareOverWeight: math.NaN()}
	}
	return metrics.KeyFairness{Jain: val(f.Jain), MaxShareOverWeight: val(f.MaxShareOverWeight), MinShareOverWeight: val(f.MinShareOverWeight)}
}
