package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/scheduler"
)

// Config configures one simulation.
type Config struct {
	Policy *configs.Policy
	Fleet  Fleet
	Seed   uint64 // seeds the scheduler's tie-breaking
	// Thresholds are the dispatcher's overload thresholds (zero: off, as by default).
	Thresholds filters.Thresholds
}

// Run is what happened to the arrivals: recorded by a dispatcher
// (Trace.Recorded) or simulated (Simulate). Arrivals carry the class the
// run's policy resolved.
type Run struct {
	Arrivals    []Arrival
	Dispatches  []Dispatch
	Rejects     []Reject
	Completions []Dispatch // in completion order; nil when not known (a recorded run)
	End         int64      // when the last event happened
}

// reportEvery is how often an idle modelled worker reports, so that its
// registry entry (TTL workers.MaxTTLms) never expires.
const reportEvery = 60e9

// Simulate replays arrivals (in time order) through the scheduler with the
// policy against the modelled fleet until every request is dispatched and
// completed or rejected, or nothing more can happen (requests left queued
// for want of a worker are reported as neither).
func Simulate(cfg Config, arrivals []Arrival) (*Run, error) {
	if cfg.Policy == nil || len(cfg.Fleet) == 0 {
		return nil, fmt.Errorf("sim: a policy and at least one worker are needed")
	}
	for _, w := range cfg.Fleet {
		if w.Ranks < 1 || !(w.Rate > 0) {
			return nil, fmt.Errorf("sim: worker %s: want ranks >= 1 and a rate > 0 (got %d, %v)", w.ID, w.Ranks, w.Rate)
		}
	}
	if !slices.IsSortedFunc(arrivals, func(a, b Arrival) int { return int(a.T - b.T) }) {
		arrivals = slices.Clone(arrivals)
		slices.SortStableFunc(arrivals, func(a, b Arrival) int { return int(a.T - b.T) })
	}
	start := int64(0)
	if len(arrivals) > 0 {
		start = arrivals[0].T
	}
	for _, w := range cfg.Fleet {
		start = min(start, w.Join)
	}
	s := scheduler.New(scheduler.Config{Policy: cfg.Policy, Thresholds: cfg.Thresholds, Scoring: filters.DefaultScoring(),
		Rand: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}, start)
	fleet := make([]*worker, len(cfg.Fleet))
	byID := make(map[string]*worker, len(fleet))
	for i, spec := range cfg.Fleet {
		fleet[i] = newWorker(spec)
		byID[spec.ID] = fleet[i]
	}
	run := &Run{Arrivals: make([]Arrival, 0, len(arrivals))}
	keys := make(map[string]string, len(arrivals)) // request id -> key
	var done []*Dispatch
	var ticks []scheduler.Decision
	report := func(now int64, w *worker) {
		s.Report(now, w.report())
		w.last = now
	}
	decide := func(now int64, d scheduler.Decision) {
		name := ""
		if d.Req != nil && d.Req.Class >= 0 {
			name = cfg.Policy.Classes[d.Req.Class].Name
		}
		switch d.Kind {
		case scheduler.Dispatch:
			disp := &Dispatch{T: now, ID: d.Req.ID, Class: name, Key: keys[d.Req.ID], Cost: d.Req.Cost, Worker: d.Worker, Rank: int(d.Rank)}
			run.Dispatches = append(run.Dispatches, *disp)
			w := byID[d.Worker]
			w.receive(now, int(d.Rank), d.Seq, disp)
			report(now, w)
		case scheduler.Reject:
			run.Rejects = append(run.Rejects, Reject{T: now, ID: d.Req.ID, Class: name, Key: keys[d.Req.ID], Code: string(d.Err.Code)})
		}
	}
	drain := func(now int64) {
		for d := s.Next(now); d.Kind != scheduler.None; d = s.Next(now) {
			decide(now, d)
		}
	}
	next := 0 // next arrival
	last := int64(-1)
	for {
		// The next event: an arrival, a worker joining, a worker's change,
		// or the scheduler's own (a queued request's deadline, a key over
		// its token budget servable again).
		now := int64(-1)
		early := func(t int64) {
			if t >= 0 && (now < 0 || t < now) {
				now = t
			}
		}
		if next < len(arrivals) {
			early(arrivals[next].T)
		}
		for _, w := range fleet {
			if !w.joined {
				early(w.spec.Join)
			} else {
				early(w.next())
			}
		}
		if t := s.NextWake(); t > 0 && t > last { // 0: nothing due
			early(t)
		}
		if now < 0 {
			break
		}
		last = now
		run.End = now
		for _, w := range fleet {
			switch {
			case !w.joined && w.spec.Join <= now:
				w.joined = true
				report(now, w)
			case w.joined:
				var changed bool
				done, changed = w.advance(now, done)
				if changed || now-w.last >= reportEvery {
					report(now, w)
				}
			}
		}
		for next < len(arrivals) && arrivals[next].T <= now {
			a := arrivals[next]
			next++
			keys[a.ID] = a.Key
			key := a.Key
			if key == "_" {
				key = "" // the default key, as the dispatcher spells it
			}
			d := s.Arrive(now, &request.Arrival{ID: a.ID, Token: a.Token, ISL: a.ISL, Cached: a.Cached, Published: a.Published, Key: key})
			a.Class = cfg.Policy.Classes[d.Req.Class].Name
			run.Arrivals = append(run.Arrivals, a)
			decide(now, d)
		}
		ticks = s.Tick(now, ticks[:0])
		for _, d := range ticks {
			decide(now, d)
		}
		drain(now)
	}
	for _, d := range done {
		run.Completions = append(run.Completions, *d)
	}
	return run, nil
}
