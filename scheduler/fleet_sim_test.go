package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// The virtual-time fleet of the tests of docs/design.md, Token budgets,
// Deadlines, Shedding, Tier floors and Preemption: workers of one rank that
// each run one request at a time at a fixed rate of actual tokens per second,
// behind a class gate of 0 active prefill tokens, so that requests wait in
// the scheduler and the fleet serves exactly its rate while backlogged.
// Events (arrivals, completions, the scheduler's own wake-ups) are taken in
// time order; nothing here reads a clock.

// vjob is a request running on a vworker.
type vjob struct {
	d          Decision
	actual     uint64
	start, end int64
}

// vworker runs one request at a time.
type vworker struct {
	id   string
	rate float64 // actual tokens per second
	cur  *vjob
	seen uint64
}

func (w *vworker) report() workers.Report {
	var prefill, reqs uint64
	if w.cur != nil {
		prefill, reqs = max(1, w.cur.actual), 1
	}
	return workers.Report{WorkerID: w.id, DPSize: 1, TTLms: 600000, Instance: "v", SeenSeq: w.seen, HasSeenSeq: true,
		Ranks: []workers.RankLoad{{ActivePrefillTokens: prefill, ActiveRequests: reqs}}}
}

// varrival is one request of a run: its arrival and its actual cost.
type varrival struct {
	a      request.Arrival
	actual uint64
}

// vfleet is one run.
type vfleet struct {
	t      testing.TB
	s      *Scheduler
	pol    *configs.Policy
	now    int64
	ws     []*vworker
	byID   map[string]*vworker
	queue  []varrival // arrivals not yet made, by time
	actual map[string]uint64
	settle bool
	// exempt names one request admitted without shedding (the
	// counterfactual of TestShedCounterfactual); "": none.
	exempt string

	// Callbacks, each optional.
	onDispatch func(j *vjob)
	onReject   func(d Decision)
	onQueued   func(d Decision)
	onDone     func(j *vjob)
	// topUp is called after every step to add arrivals at now (keeping keys
	// backlogged).
	topUp func(now int64)
	// at runs fn once the clock reaches t.
	timers []vtimer
}

type vtimer struct {
	t  int64
	fn func()
}

const vstart = int64(1e18)

// newFleet starts a run of policy yaml on n workers of rate actual tokens per
// second each.
func newFleet(t testing.TB, yaml string, n int, rate float64) *vfleet {
	t.Helper()
	pol, err := configs.Parse("fleet.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f := &vfleet{t: t, pol: pol, now: vstart, byID: map[string]*vworker{}, actual: map[string]uint64{}, settle: true}
	f.s = New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2))}, vstart)
	for i := range n {
		w := &vworker{id: fmt.Sprintf("w%d", i+1), rate: rate}
		f.ws = append(f.ws, w)
		f.byID[w.id] = w
		f.s.Report(f.now, w.report())
	}
	return f
}

// add queues an arrival at time at (>= now) with the actual cost (0: its
// uncached tokens).
func (f *vfleet) add(at int64, a request.Arrival, actual uint64) {
	a.Published = at
	if actual == 0 {
		actual = max(1, a.ISL-min(a.ISL, a.Cached))
	}
	i, _ := slices.BinarySearchFunc(f.queue, at, func(v varrival, t int64) int {
		if v.a.Published <= t {
			return -1
		}
		return 1
	})
	f.queue = slices.Insert(f.queue, i, varrival{a: a, actual: actual})
}

func (f *vfleet) after(t int64, fn func()) { f.timers = append(f.timers, vtimer{t, fn}) }

func (f *vfleet) handle(d Decision) {
	switch d.Kind {
	case Dispatch:
		w := f.byID[d.Worker]
		if w.cur != nil {
			f.t.Fatalf("t=%d: %s dispatched to busy %s", f.now-vstart, d.Req.ID, w.id)
		}
		act := f.actual[d.Req.ID]
		j := &vjob{d: d, actual: act, start: f.now, end: f.now + max(1, int64(float64(act)/w.rate*1e9))}
		w.cur = j
		w.seen = max(w.seen, d.Seq)
		f.s.Report(f.now, w.report())
		if f.onDispatch != nil {
			f.onDispatch(j)
		}
	case Reject:
		if f.onReject != nil {
			f.onReject(d)
		}
	case Queued:
		if f.onQueued != nil {
			f.onQueued(d)
		}
	}
}

// run advances the fleet until virtual time until (relative to the start).
func (f *vfleet) run(until int64) {
	end := vstart + until
	var ticks []Decision
	if f.topUp != nil {
		f.topUp(f.now)
	}
	for f.now < end {
		t := end
		if len(f.queue) > 0 {
			t = min(t, f.queue[0].a.Published)
		}
		for _, w := range f.ws {
			if w.cur != nil {
				t = min(t, w.cur.end)
			}
		}
		if w := f.s.NextWake(); w > f.now {
			t = min(t, w)
		}
		for _, tm := range f.timers {
			if tm.t+vstart > f.now {
				t = min(t, tm.t+vstart)
			}
		}
		t = max(t, f.now+1)
		f.now = t
		for i := 0; i < len(f.timers); i++ {
			if tm := f.timers[i]; tm.t+vstart <= f.now {
				f.timers = slices.Delete(f.timers, i, i+1)
				i--
				tm.fn()
			}
		}
		for _, w := range f.ws {
			if j := w.cur; j != nil && j.end <= f.now {
				w.cur = nil
				if f.settle {
					f.s.Settle(w.id, Completion{Seq: j.d.Seq, RequestID: j.d.Req.ID, PrefillTokens: j.actual})
				}
				f.s.Report(f.now, w.report())
				if f.onDone != nil {
					f.onDone(j)
				}
			}
		}
		for len(f.queue) > 0 && f.queue[0].a.Published <= f.now {
			v := f.queue[0]
			f.queue = f.queue[1:]
			f.actual[v.a.ID] = v.actual
			f.handle(f.arrive(&v.a))
		}
		if f.topUp != nil {
			f.topUp(f.now)
			for len(f.queue) > 0 && f.queue[0].a.Published <= f.now {
				v := f.queue[0]
				f.queue = f.queue[1:]
				f.actual[v.a.ID] = v.actual
				f.handle(f.s.Arrive(f.now, &v.a))
			}
		}
		ticks = f.s.Tick(f.now, ticks[:0])
		for _, d := range ticks {
			f.handle(d)
		}
		for d := f.s.Next(f.now); d.Kind != None; d = f.s.Next(f.now) {
			f.handle(d)
		}
	}
}

// arrive admits a, without shedding when it is the exempt request.
func (f *vfleet) arrive(a *request.Arrival) Decision {
	if f.exempt == "" || a.ID != f.exempt {
		return f.s.Arrive(f.now, a)
	}
	saved := f.s.shed
	f.s.shed = make([]*shedState, len(saved))
	d := f.s.Arrive(f.now, a)
	f.s.shed = saved
	return d
}

// perSecond adds v to the bucket of second (t - vstart) / 1 s of m.
func perSecond(m map[string][]float64, name string, t int64, v float64, secs int) {
	s := int((t - vstart) / 1e9)
	if m[name] == nil {
		m[name] = make([]float64, secs)
	}
	if s >= 0 && s < secs {
		m[name][s] += v
	}
}
