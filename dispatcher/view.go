package dispatcher

import (
	"math"
	"time"

	"fairdispatch/metrics"
	"fairdispatch/wire"
)

// rateMemo is what the actor keeps from one View to the next for DispatchRate.
type rateMemo struct {
	at   time.Time
	prev map[string]uint64 // Dispatched per class name in the previous View
}

// served is what the dispatcher has served one class since it started.
type served struct{ requests, cost uint64 }

// countServed adds an accepted request of class k and cost to the class's
// totals in the view.
func (a *Actor) countServed(k int, cost uint64) {
	if k < 0 {
		return
	}
	name := a.className(k)
	sv := a.served[name]
	if sv == nil {
		sv = &served{}
		a.served[name] = sv
	}
	sv.requests++
	sv.cost += cost
}

// View returns the last published snapshot.
func (a *Actor) View() *wire.QueueView { return a.view.Load() }

// publishView builds a new View and updates the gauges from it.
func (a *Actor) publishView(now time.Time) {
	s := a.d.Scheduler
	v := &wire.QueueView{At: now, Connected: a.connected, Standby: !a.leading.Load(), Grace: s.InGrace(now.UnixNano()), Held: len(a.held), InFlight: a.inFlight}
	if a.out {
		since := time.Unix(0, a.outSince)
		v.NoLiveWorkers, v.OutageSince = true, &since
	}
	v.Policy = a.Policy()
	a.stats = s.Stats(a.stats[:0])
	s.KeyFairness(now.UnixNano(), a.stats)
	v.Classes = make([]wire.ClassView, len(a.stats))
	pol := s.Policy()
	for k, c := range a.stats {
		cv := &v.Classes[k]
		cv.ClassStats = c
		if k < len(pol.Classes) {
			cv.Quantum = pol.Classes[k].Quantum
		}
		if sv := a.served[c.Name]; sv != nil {
			cv.Dispatched, cv.DispatchedCost = sv.requests, sv.cost
		}
		if el := now.Sub(a.rate.at).Seconds(); !a.rate.at.IsZero() && el > 0 {
			cv.DispatchRate = float64(cv.Dispatched-min(cv.Dispatched, a.rate.prev[c.Name])) / el
		}
	}
	a.rate.at = now
	if a.rate.prev == nil {
		a.rate.prev = make(map[string]uint64, len(a.served))
	}
	for name, sv := range a.served {
		a.rate.prev[name] = sv.requests
	}
	// The oldest queued request per class: one pass over what the dispatcher
	// holds (at most --max-held), once a second. The queues' heads would not
	// do: under wspt or strict priority the head is not the oldest.
	nowNs := now.UnixNano()
	for _, h := range a.held {
		if h.inFlight || h.dead || h.snap == nil || h.snap.Class < 0 || h.snap.Class >= len(v.Classes) {
			continue
		}
		if ms := max(0, nowNs-h.snap.Arrival) / 1e6; ms > v.Classes[h.snap.Class].OldestWaitMs {
			v.Classes[h.snap.Class].OldestWaitMs = ms
		}
	}
	for k := range v.Classes {
		a.d.Metrics.SetOldestQueued(k, float64(v.Classes[k].OldestWaitMs)/1e3)
	}
	v.Workers = make([]wire.WorkerView, 0, s.Workers().Len()) // [] when none is live, never null
	for _, w := range s.Workers().All() {
		wv := wire.WorkerView{ID: w.ID, Instance: w.Instance, Draining: w.Draining, Excluded: w.Excluded,
			Refusals: w.Refusals(), MaxActive: w.MaxActive, Compact: w.Compact, Overloaded: s.Overloaded(w), Bookings: w.Bookings()}
		for i := range w.Ranks {
			rk := &w.Ranks[i]
			l := rk.Load()
			wv.Ranks = append(wv.Ranks, wire.RankView{
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
		st := metrics.ClassState{Requests: uint64(c.Pending), ISLTokens: c.ISLTokens, CachedTokens: c.CachedTokens, Deficit: c.Deficit, Keys: c.Keys}
		if c.ThrottledKeys != nil && c.BudgetCharged != nil {
			st.Budgeted, st.ThrottledKeys, st.BudgetCharged = true, *c.ThrottledKeys, *c.BudgetCharged
		}
		m.SetClass(k, st)
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
func keyFairness(f *wire.KeyFairness) metrics.KeyFairness {
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
