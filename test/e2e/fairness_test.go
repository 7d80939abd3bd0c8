package e2e

import (
	"fmt"
	"testing"
	"time"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
)

// frlFigures are the measurements of one arm of the seed's regression.
type frlFigures struct {
	completed, rejected, duplicates int
	premiumFirst320                 int // premium among the first 320 completions
	regularFirst320                 int
	regularOutAt320thPremium        int // regular requests not completed when the 320th premium completes
	regularBy80thPremium            int // regular completions before the 80th premium completion
	regularBetween80And240          int // regular completions between the 80th and 240th premium completions
	elapsed                         time.Duration
}

func (f frlFigures) String() string {
	return fmt.Sprintf("completed %d (rejected %d, duplicate records %d); first 320: premium %d regular %d; "+
		"regular by 80th premium %d; regular between 80th and 240th premium %d; regular outstanding at 320th premium %d; run %v",
		f.completed, f.rejected, f.duplicates, f.premiumFirst320, f.regularFirst320, f.regularBy80thPremium,
		f.regularBetween80And240, f.regularOutAt320thPremium, f.elapsed.Round(time.Millisecond))
}

// frlFairnessArm runs the seed's burst on a fresh nats-server and dispatcher
// with the given quanta: one mock worker running four sequences, 320 premium
// and 320 regular 512-token, one-output-token requests published alternately.
//
// All 640 are queued before any is dispatched, so that they are released
// together whatever the speed of publication: the worker starts draining
// (live, but busy for every class gate, docs/protocol.md, Load report; docs/design.md, Gates), and stops draining
// once the dispatcher holds the whole burst in its queues.
func frlFairnessArm(t *testing.T, premiumQuantum, regularQuantum int) frlFigures {
	t.Helper()
	f, _ := frlFairnessRun(t, premiumQuantum, regularQuantum)
	return f
}

// frlFairnessRun is frlFairnessArm with extra dispatcher flags (later flags
// win), also returning the dispatcher.
func frlFairnessRun(t *testing.T, premiumQuantum, regularQuantum int, extra ...string) (frlFigures, *proc) {
	t.Helper()
	const perClass = 320
	ns := startNATS(t)
	policy := writePolicy(t, fairPolicy(t, premiumQuantum, regularQuantum))
	p := startDispatcher(t, ns.URL(), append([]string{"--policy-config", policy}, extra...)...)
	nc := connect(t, ns.URL())

	w := startDrainingMock(t, nc, mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 200000})
	waitDraining(t, p, "w1")

	run := startLoad(t, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "premium", Count: perClass}, {Class: "regular", Count: perClass}},
		ISL:     512,
		Order:   loadgen.OrderAlternating,
		Timeout: 45 * time.Second,
	})
	waitQueued(t, p, 2*perClass, 20*time.Second)
	release(t, w)
	res := run.wait(t, time.Minute)

	f := frlFigures{completed: len(res.Completions), rejected: len(res.Rejected), duplicates: res.Duplicates, elapsed: res.Elapsed}
	share := res.PrefixShare(perClass)
	f.premiumFirst320, f.regularFirst320 = share["premium"], share["regular"]
	premium, regular := 0, 0
	for _, c := range res.Completions {
		switch c.Class {
		case "premium":
			premium++
			switch premium {
			case 80:
				f.regularBy80thPremium = regular
			case 240:
				f.regularBetween80And240 = regular - f.regularBy80thPremium
			case perClass:
				f.regularOutAt320thPremium = perClass - regular
			}
		case "regular":
			regular++
		default:
			t.Errorf("completion of request %s in unexpected class %q", c.RequestID, c.Class)
		}
	}
	if f.completed != 2*perClass || f.rejected != 0 || !res.Complete {
		t.Errorf("completed %d, rejected %d (%v), complete %v; want all %d completed", f.completed, f.rejected,
			res.PerClass, res.Complete, 2*perClass)
	}
	for _, c := range []string{"premium", "regular"} {
		if st := res.PerClass[c]; st.Completed != perClass {
			t.Errorf("class %s: completed %d, want %d", c, st.Completed, perClass)
		}
	}
	// A completion record may overtake the dispatcher's handling of the
	// acceptance (and its "dispatched" outcome), so poll the counter.
	waitFor(t, 20*time.Second, "fairdispatch_dispatched_total to reach 640", func() bool {
		return p.metric("fairdispatch_dispatched_total") == 2*perClass
	})
	for _, c := range []string{"premium", "regular"} {
		if got := p.metric("fairdispatch_dispatched_total", `class="`+c+`"`); got != perClass {
			t.Errorf("fairdispatch_dispatched_total{class=%q} = %v, want %d", c, got, perClass)
		}
	}
	// Under CPU pressure a handshake can outlast --dispatch-timeout: the
	// acceptance is then lost and the request dispatched again (docs/protocol.md, Dispatch handshake), which
	// shows as duplicate completion records. Only first records are counted.
	t.Logf("handshakes accepted %v timeout %v late %v; redelivered %v",
		p.metric("fairdispatch_handshakes_total", `outcome="accepted"`), p.metric("fairdispatch_handshakes_total", `outcome="timeout"`),
		p.metric("fairdispatch_handshakes_total", `outcome="late"`), p.metric("fairdispatch_redelivered_messages_total"))
	return f, p
}

// TestFairnessWeightedVersusEqualQuanta reproduces the seed's regression with
// the mock worker (docs/design.md, DRR): with quanta 512:128 premium gets about four times
// regular's share of a backlogged single worker while regular still makes
// progress; with equal quanta the split is even.
func TestFairnessWeightedVersusEqualQuanta(t *testing.T) {
	var weighted, equal frlFigures
	ok := t.Run("weighted_512_128", func(t *testing.T) {
		weighted = frlFairnessArm(t, 512, 128)
		t.Logf("weighted 512:128: %v", weighted)
		f := weighted
		if f.premiumFirst320 < 240 {
			t.Errorf("premium in the first 320 completions = %d, want >= 240", f.premiumFirst320)
		}
		if f.regularFirst320 < 48 {
			t.Errorf("regular in the first 320 completions = %d, want >= 48", f.regularFirst320)
		}
		if f.regularOutAt320thPremium < 220 || f.regularOutAt320thPremium > 260 {
			t.Errorf("regular outstanding at the 320th premium completion = %d, want 220 to 260", f.regularOutAt320thPremium)
		}
		if f.regularBy80thPremium < 12 {
			t.Errorf("regular completions by the 80th premium completion = %d, want >= 12", f.regularBy80thPremium)
		}
		if f.regularBetween80And240 < 32 {
			t.Errorf("regular completions between the 80th and 240th premium completions = %d, want >= 32", f.regularBetween80And240)
		}
	})
	ok = t.Run("equal_512_512", func(t *testing.T) {
		equal = frlFairnessArm(t, 512, 512)
		t.Logf("equal 512:512: %v", equal)
		f := equal
		if f.premiumFirst320 < 140 || f.premiumFirst320 > 180 {
			t.Errorf("premium in the first 320 completions = %d, want 140 to 180", f.premiumFirst320)
		}
		if f.regularOutAt320thPremium > 20 {
			t.Errorf("regular outstanding at the 320th premium completion = %d, want <= 20", f.regularOutAt320thPremium)
		}
	}) && ok
	if !ok {
		return
	}
	if d := weighted.premiumFirst320 - equal.premiumFirst320; d < 60 {
		t.Errorf("premium in the first 320: weighted %d - equal %d = %d, want >= 60", weighted.premiumFirst320, equal.premiumFirst320, d)
	}
	if d := weighted.regularOutAt320thPremium - equal.regularOutAt320thPremium; d < 200 {
		t.Errorf("regular outstanding at the 320th premium: weighted %d - equal %d = %d, want >= 200",
			weighted.regularOutAt320thPremium, equal.regularOutAt320thPremium, d)
	}
}
