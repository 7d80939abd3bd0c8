package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"fairdispatch/request"
)

// deadlineClass is one class of queue policy q whose requests carry their
// own deadlines; shed turns on shedding at admission.
func deadlineClass(q string, shed bool) string {
	return fmt.Sprintf(`default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 1000, prefill_busy_threshold: 0, queue_policy: %s, shed_unreachable: %v}
`, q, shed)
}

// mixArrivals is a Poisson mix at load × 10,000 tokens/s (the fleet of the
// tests): interactive requests of 200 tokens with a 1 s deadline carry half
// the tokens, batch requests of 2,000 tokens with a 30 s deadline the other
// half, for secs seconds.
func mixArrivals(load float64, secs int, seed uint64) []request.Arrival {
	rng := rand.New(rand.NewPCG(seed, 3))
	var out []request.Arrival
	for _, k := range []struct {
		name     string
		cost     uint64
		deadline uint64
	}{{"i", 200, 1000}, {"b", 2000, 30000}} {
		rate := load * 5000 / float64(k.cost) // per second
		t := 0.0
		for n := 0; ; n++ {
			t += rng.ExpFloat64() / rate
			if t >= float64(secs) {
				break
			}
			out = append(out, request.Arrival{ID: fmt.Sprintf("%s/%d", k.name, n), Token: "c", ISL: k.cost,
				Published: vstart + int64(t*1e9), HasDeadline: true, DeadlineMs: k.deadline})
		}
	}
	slices.SortFunc(out, func(a, b request.Arrival) int { return int(a.Published - b.Published) })
	return out
}

// deadlineRun is what one run did with every request: started (dispatched)
// before its deadline, expired, or rejected at admission; and the wait
// projected at admission of each request queued in a shedding class.
type deadlineRun struct {
	met, expired, shed map[string]bool
	waited, projected  map[string]int64
}

func runDeadlines(t *testing.T, yaml string, arrivals []request.Arrival, secs int) deadlineRun {
	f := newFleet(t, yaml, 4, 2500)
	r := deadlineRun{met: map[string]bool{}, expired: map[string]bool{}, shed: map[string]bool{},
		waited: map[string]int64{}, projected: map[string]int64{}}
	for _, a := range arrivals {
		f.add(a.Published, a, 0)
	}
	f.onDispatch = func(j *vjob) {
		r.met[j.d.Req.ID] = j.start <= j.d.Req.Deadline
		r.waited[j.d.Req.ID] = j.start - j.d.Req.Arrival
	}
	f.onQueued = func(d Decision) {
		if d.Projected >= 0 {
			r.projected[d.Req.ID] = d.Projected
		}
	}
	f.onReject = func(d Decision) {
		switch d.Err.Code {
		case request.Expired:
			r.expired[d.Req.ID] = true
		case request.DeadlineUnreachable:
			r.shed[d.Req.ID] = true
		default:
			t.Fatalf("%s: %v", d.Req.ID, d.Err)
		}
	}
	f.run(int64(secs+120) * 1e9)
	return r
}

func metShare(r deadlineRun, n int) float64 {
	met := 0
	for _, ok := range r.met {
		if ok {
			met++
		}
	}
	return float64(met) / float64(n)
}

// TestEDFMeetsDeadlines is acceptance 2's end-to-end figure, on the virtual
// fleet: a mix whose deadlines are feasible (1 s for short interactive
// requests, 30 s for long batch ones, half the tokens each) at 90% load.
// EDF starts at least 99% of the requests before their deadline; FCFS, the
// negative control, starts fewer.
func TestEDFMeetsDeadlines(t *testing.T) {
	const secs = 600
	arrivals := mixArrivals(0.9, secs, 1)
	edf := metShare(runDeadlines(t, deadlineClass("edf", false), arrivals, secs), len(arrivals))
	fcfs := metShare(runDeadlines(t, deadlineClass("fcfs", false), arrivals, secs), len(arrivals))
	t.Logf("%d requests at 90%% load: edf met %.2f%% of deadlines, fcfs %.2f%%", len(arrivals), 100*edf, 100*fcfs)
	if edf < 0.99 {
		t.Errorf("edf met %.4f of deadlines, want >= 0.99", edf)
	}
	if fcfs >= edf {
		t.Errorf("fcfs met %.4f, edf %.4f: want fcfs below edf", fcfs, edf)
	}
}

// TestShedUnreachable is acceptance 2's shedding figure: under an overload of
// 2x, the requests rejected as deadline_unreachable at admission would in
// fact have expired: run again with shedding off (every request waits), fewer
// than 5% of those shed started before their deadline there (fcfs). In an
// edf class the copy that waits serves some batch requests near their
// deadline instead of interactive ones, so the share is far higher there;
// the test then asserts that shedding meets more deadlines than waiting. It
// also measures the estimate's error: the projected wait of the requests
// queued against their real wait.
func TestShedUnreachable(t *testing.T) {
	const secs = 120
	arrivals := mixArrivals(2, secs, 2)
	for _, q := range []string{"edf", "fcfs"} {
		shed := runDeadlines(t, deadlineClass(q, true), arrivals, secs)
		wait := runDeadlines(t, deadlineClass(q, false), arrivals, secs)
		falseRej := 0
		byType := map[string]int{}
		for id := range shed.shed {
			if wait.met[id] {
				falseRej++
				byType[id[:1]]++
			}
		}
		t.Logf("%s: false rejections by type (b batch, i interactive): %v", q, byType)
		frac := float64(falseRej) / float64(max(1, len(shed.shed)))
		var errs []float64
		for id, p := range shed.projected {
			if w, ok := shed.waited[id]; ok {
				errs = append(errs, float64(p-w)/1e9)
			}
		}
		slices.Sort(errs)
		abs := make([]float64, len(errs))
		for i, e := range errs {
			abs[i] = math.Abs(e)
		}
		slices.Sort(abs)
		pct := func(xs []float64, p float64) float64 {
			if len(xs) == 0 {
				return 0
			}
			return xs[int(p*float64(len(xs)-1))]
		}
		t.Logf("%s, %d requests at 2x: %d shed, %d of them met their deadline when let wait (%.2f%%); met %.1f%% with shedding, %.1f%% without; projection error (projected - real wait) median %+.2fs, |error| p90 %.2fs, p99 %.2fs over %d queued",
			q, len(arrivals), len(shed.shed), falseRej, 100*frac, 100*metShare(shed, len(arrivals)), 100*metShare(wait, len(arrivals)),
			pct(errs, 0.5), pct(abs, 0.9), pct(abs, 0.99), len(errs))
		if len(shed.shed) == 0 {
			t.Errorf("%s: nothing shed under 2x overload", q)
		}
		switch q {
		case "fcfs":
			if frac >= 0.05 {
				t.Errorf("%s: %.4f of shed requests would have met their deadline, want < 0.05", q, frac)
			}
		case "edf":
			// Known miss (docs/design.md, Shedding): the batch requests shed
			// would, left to wait, have been served near their deadline at
			// the cost of interactive ones; shedding them meets more deadlines.
			if metShare(shed, len(arrivals)) <= metShare(wait, len(arrivals)) {
				t.Errorf("edf: shedding met %.3f of deadlines, waiting %.3f: want more with shedding",
					metShare(shed, len(arrivals)), metShare(wait, len(arrivals)))
			}
		}
	}
}
