package scheduler

import (
	"math/rand/v2"
	"strings"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
)

// The fleet outage of docs/design.md, Fleet outage: while no worker is live,
// nothing fails for want of workers.

// outagePolicy has a queueing class with a limit of 2 requests per worker, a
// second queueing class with a smaller quantum, and a class that never queues.
const outagePolicy = `default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 400, prefill_busy_threshold: 100000, request_queue_limit_per_worker: 2}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 100, prefill_busy_threshold: 100000}
  - {name: batch, quantum: 100}
`

// outageFixture is a fixture whose scheduler has a grace and a no-workers timeout.
func outageFixture(t *testing.T, grace, timeout int64) *fixture {
	t.Helper()
	pol, err := configs.Parse("outage.yaml", []byte(outagePolicy))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Grace: grace, NoWorkersTimeout: timeout,
		Rand: rand.New(rand.NewPCG(3, 3))}, t0)
	return &fixture{t: t, s: s, now: t0}
}

// loseAll lets every worker's TTL (3 s in the fixture's reports) run out and
// ticks; it returns the tick's decisions.
func (f *fixture) loseAll() []Decision {
	f.t.Helper()
	f.now += 3e9 + 1
	got := f.s.Tick(f.now, nil)
	if n := f.s.Workers().Len(); n != 0 {
		f.t.Fatalf("live workers after the TTL = %d, want 0", n)
	}
	return got
}

func (f *fixture) wantOutage(wantOut bool, wantSince int64) {
	f.t.Helper()
	since, out := f.s.Outage(f.now)
	if out != wantOut || since != wantSince {
		f.t.Fatalf("Outage(now) = (%d, %v), want (%d, %v)", since-t0, out, wantSince-t0, wantOut)
	}
}

func TestOutageQueuesInsteadOfRejecting(t *testing.T) {
	f := outageFixture(t, 0, 0)
	f.report("w1", 0)
	f.wantKind(f.arrive("batch", 10), Dispatch) // a class that never queues dispatches at once
	f.loseAll()
	f.wantOutage(true, f.now)
	// Every class, the one that never queues included, and past the
	// premium limit (2 per live worker, 0 with none).
	for i := range 4 {
		f.wantKind(f.arrive("premium", 100), Queued)
		f.wantKind(f.arrive("regular", 100), Queued)
		f.wantKind(f.arrive("batch", 100), Queued)
		if got := f.s.Queued(0); got != i+1 {
			t.Fatalf("premium queued = %d, want %d", got, i+1)
		}
	}
	// A pin to a worker that is gone waits too: every worker is gone.
	f.wantKind(f.arrive("regular", 100, func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: request.AnyRank} }), Queued)
	for range 3 {
		if d := f.s.Next(f.now); d.Kind != None {
			t.Fatalf("Next during the outage = %d (%v), want None", d.Kind, d.Err)
		}
		f.now += 60e9
		if got := f.s.Tick(f.now, nil); len(got) != 0 {
			t.Fatalf("Tick an hour into an outage without a timeout rejected %d, want 0", len(got))
		}
	}
	if got := f.s.Queued(0) + f.s.Queued(1) + f.s.Queued(2); got != 13 {
		t.Fatalf("queued = %d, want 13", got)
	}
}

func TestOutageEndsWhenAWorkerReports(t *testing.T) {
	f := outageFixture(t, 0, 0)
	f.report("w1", 0)
	f.loseAll()
	for range 8 { // cost 100 each
		f.wantKind(f.arrive("premium", 100), Queued)
		f.wantKind(f.arrive("regular", 100), Queued)
	}
	pinned := f.arrive("regular", 100, func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: request.AnyRank} })
	f.wantKind(pinned, Queued)
	f.now += 1e9
	f.report("w2", 0) // another worker returns; w1 stays gone
	f.wantOutage(false, 0)
	// DRR order (docs/design.md, DRR): premium (quantum 400) sends four of
	// cost 100 for each one of regular (quantum 100); the pin to the gone w1
	// fails as no_endpoints when its turn comes, as it would have without the outage.
	var order strings.Builder
	for {
		d := f.s.Next(f.now)
		if d.Kind == None {
			break
		}
		switch {
		case d.Req == pinned.Req:
			f.wantReject(d, request.NoEndpoints)
			order.WriteByte('x')
		case d.Kind != Dispatch:
			t.Fatalf("Next = %d (%v), want a dispatch", d.Kind, d.Err)
		case d.Req.Class == 0:
			order.WriteByte('P')
		default:
			order.WriteByte('R')
		}
	}
	// The pin arrived last: it is the regular class's last request (FCFS).
	if got, want := order.String(), "PPPPRPPPPRRRRRRRx"; got != want {
		t.Fatalf("dispatch order after the return = %s, want %s", got, want)
	}
}

func TestOutageLimitsOnlyWithoutLiveWorkers(t *testing.T) {
	f := outageFixture(t, 0, 0)
	// One live worker, busy: the premium limit is 2.
	f.report("w1", 0, func(r *workers.Report) { r.Draining = true }) // draining: live, takes nothing
	f.wantOutage(false, 0)
	f.wantKind(f.arrive("premium", 100), Queued)
	f.wantKind(f.arrive("premium", 100), Queued)
	f.wantReject(f.arrive("premium", 100), request.QueueFull)
	f.loseAll()
	f.wantKind(f.arrive("premium", 100), Queued)
	f.wantKind(f.arrive("premium", 100), Queued)
	// Back with one (draining) worker: the limit applies again, nothing is evicted.
	f.report("w1", 0, func(r *workers.Report) { r.Draining = true })
	d := f.arrive("premium", 100)
	f.wantReject(d, request.QueueFull)
	if d.Err.Current != 4 || d.Err.Limit != 2 || f.s.Queued(0) != 4 {
		t.Fatalf("queue_full current %d limit %d, queued %d; want 4, 2, 4", d.Err.Current, d.Err.Limit, f.s.Queued(0))
	}
}

func TestOutagePinToGoneWorkerWhileAnotherIsLive(t *testing.T) {
	f := outageFixture(t, 0, 0)
	f.report("w1", 0)
	f.report("w2", 0)
	f.now += 2e9
	f.report("w2", 0)
	f.now += 1e9 + 1
	f.s.Tick(f.now, nil) // w1 expires, w2 is live
	f.wantOutage(false, 0)
	pin := func(a *request.Arrival) { a.Pin = request.Target{Worker: "w1", Rank: request.AnyRank} }
	f.wantReject(f.arrive("batch", 10, pin), request.NoEndpoints)
	f.wantReject(f.arrive("regular", 10, pin), request.NoEndpoints)
}

func TestOutageDeadlinesStillExpire(t *testing.T) {
	f := outageFixture(t, 0, 0)
	f.report("w1", 0)
	f.loseAll()
	d := f.arrive("regular", 100, func(a *request.Arrival) { a.DeadlineMs, a.HasDeadline = 500, true })
	f.wantKind(d, Queued)
	late := f.arrive("regular", 100, func(a *request.Arrival) { a.DeadlineMs, a.HasDeadline, a.Published = 500, true, f.now-501e6 })
	f.wantReject(late, request.Expired)
	if got := f.s.Tick(f.now+400e6, nil); len(got) != 0 {
		t.Fatalf("Tick before the deadline rejected %d, want 0", len(got))
	}
	f.now += 600e6
	got := f.s.Tick(f.now, nil)
	if len(got) != 1 || got[0].Req != d.Req || got[0].Err.Code != request.Expired {
		t.Fatalf("Tick after the deadline = %+v, want %s expired", got, d.Req.ID)
	}
}

func TestOutageTimeoutRejects(t *testing.T) {
	const timeout = 2e9
	f := outageFixture(t, 0, timeout)
	f.report("w1", 0)
	f.loseAll()
	since := f.now
	f.wantOutage(true, since)
	var held []*request.Snapshot
	for range 3 {
		for _, c := range []string{"premium", "regular", "batch"} {
			d := f.arrive(c, 100)
			f.wantKind(d, Queued)
			held = append(held, d.Req)
		}
	}
	f.now = since + timeout - 1
	if got := f.s.Tick(f.now, nil); len(got) != 0 {
		t.Fatalf("Tick 1 ns before the timeout rejected %d, want 0", len(got))
	}
	f.wantKind(f.arrive("regular", 100), Queued) // still held
	f.now = since + timeout
	got := f.s.Tick(f.now, nil)
	if len(got) != len(held)+1 {
		t.Fatalf("Tick at the timeout rejected %d, want %d", len(got), len(held)+1)
	}
	for _, d := range got {
		if d.Kind != Reject || d.Err.Code != request.NoEndpoints {
			t.Fatalf("Tick at the timeout: %d %v, want no_endpoints", d.Kind, d.Err)
		}
	}
	if n := f.s.Queued(0) + f.s.Queued(1) + f.s.Queued(2); n != 0 {
		t.Fatalf("queued after the timeout = %d, want 0", n)
	}
	if f.s.NextDeadline() != 0 {
		t.Fatal("a deadline is left after the timeout")
	}
	// Past the timeout, an arrival fails at once.
	f.wantReject(f.arrive("premium", 100), request.NoEndpoints)
	// A worker returns: the outage is over; a second one starts its own clock.
	f.report("w1", 0)
	f.wantOutage(false, 0)
	f.wantKind(f.arrive("premium", 100), Dispatch)
	f.loseAll()
	f.wantOutage(true, f.now)
	f.wantKind(f.arrive("premium", 100), Queued)
}

func TestOutageAndStartupGrace(t *testing.T) {
	const grace, timeout = 3e9, 2e9
	t.Run("no worker at all: the outage starts when the grace ends", func(t *testing.T) {
		f := outageFixture(t, grace, timeout)
		f.wantKind(f.arrive("premium", 100), Queued)
		f.wantOutage(false, 0) // the grace is not an outage
		f.now = t0 + grace
		f.wantOutage(true, t0+grace)
		f.now = t0 + grace + timeout - 1
		if got := f.s.Tick(f.now, nil); len(got) != 0 {
			t.Fatalf("Tick within the timeout after the grace rejected %d, want 0", len(got))
		}
		f.now = t0 + grace + timeout
		if got := f.s.Tick(f.now, nil); len(got) != 1 || got[0].Err.Code != request.NoEndpoints {
			t.Fatalf("Tick at grace + timeout = %+v, want one no_endpoints", got)
		}
	})
	t.Run("workers lost during the grace: the outage starts when the grace ends", func(t *testing.T) {
		f := outageFixture(t, 4e9, timeout)
		f.report("w1", 0)
		f.now += 3e9 + 1
		f.s.Tick(f.now, nil)
		f.wantOutage(false, 0)
		f.now = t0 + 4e9
		f.wantOutage(true, t0+4e9)
	})
}
