package e2e

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
)

// ffPolicy: premium 4 : regular 1 by quanta; in each class keys a and b of
// equal weight. Key b's requests really cost 4 times their estimate (the
// worker's KeyCostFactors), which only settlement corrects.
const ffPolicy = `default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1536}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1536}
`

// ffDispatch is one dispatch seen on the worker's subject.
type ffDispatch struct {
	at         time.Time
	class, key string
	real       float64 // Dispatch-Cost times the key's cost factor
}

// ffShares returns the share of real cost premium got, within each class
// the share key b got, and the real cost served, in all ("") and per class,
// over ds.
func ffShares(ds []ffDispatch) (premium float64, keyB, served map[string]float64, n int) {
	served = map[string]float64{}
	byKey := map[string]float64{}
	for _, d := range ds {
		served[d.class] += d.real
		served[""] += d.real
		byKey[d.class+"/"+d.key] += d.real
	}
	keyB = map[string]float64{}
	for _, c := range []string{"premium", "regular"} {
		if s := byKey[c+"/a"] + byKey[c+"/b"]; s > 0 {
			keyB[c] = byKey[c+"/b"] / s
		}
	}
	if served[""] > 0 {
		premium = served["premium"] / served[""]
	}
	return premium, keyB, served, len(ds)
}

// ffBound is docs/design.md's bound on a share's error across the failover
// over a window serving s cost units: the key fairness bound (2 x Cmax / w,
// Cmax 2,048 real), the corrections lost with the old leader's dispatches in
// flight (4 slots x 1,536), and one request at the window's edge (2,048).
func ffBound(s float64) float64 { return (2*2048 + 4*1536 + 2048) / s }

// TestFailoverFairness (issue 26, acceptance 6; docs/design.md, Fairness
// across a failover): two dispatchers, one worker, a backlog of two classes
// (quanta 4:1) and two keys in each, key b's requests costing 4 times their
// estimate. The leader is SIGKILLed mid-backlog; the class split and the key
// splits of real cost the standby gives in the 5 s after its first dispatch
// are measured against the ideal (premium 0.8; b 0.5 of each class, as
// settlement makes it) and against the 5 s before the kill. The standby
// starts with no key standing and none of the old leader's settlement
// debts; the bound (docs/design.md, ffBound) is what the test checks, for
// each share over the cost served in the window.
func TestFailoverFairness(t *testing.T) {
	// Enough of each group to stay backlogged for the 15 s of the test at
	// the splits expected: a's requests go 4 times as fast as b's.
	groups := map[string]int{"premium/a": 1400, "premium/b": 400, "regular/a": 400, "regular/b": 150}
	factors := map[string]float64{"b": 4}
	ns := startNATS(t)
	url := ns.URL()
	file := writePolicy(t, ffPolicy)
	// Each dispatcher holds at most 200 requests, so that most of the backlog
	// is still in the stream at the kill. The standby then has a backlog of
	// every group from its first pull, as the bound assumes ("while keys stay
	// backlogged"). Holding it all, the old leader's messages would come back
	// to the standby only as their ack waits ran out, over a second or so,
	// while the standby dispatched from what had come back; premium/a, the
	// group served fastest, could run out meanwhile and regular take its
	// turns (premium's share 0.768 in one run on a loaded machine).
	args := []string{"--policy-config", file, "--max-held", "200"}
	p1 := startDispatcher(t, url, append(args, "--instance-id", "d1")...)
	p2 := launch(t, url, append(args, "--instance-id", "d2")...)
	haWaitStandby(t, p2)

	nc := connect(t, url)
	js := jsOf(t, nc)
	var mu sync.Mutex
	var seen []ffDispatch
	ids := map[string]bool{}
	sub, err := nc.Subscribe("dispatch.work.w1", func(m *nats.Msg) {
		h := dispatchHeader(t, m)
		id := h.Get("Dispatch-Request-Id")
		cost, _ := strconv.ParseFloat(h.Get("Dispatch-Cost"), 64)
		key := h.Get("Dispatch-Fairness-Key")
		f := factors[key]
		if f == 0 {
			f = 1
		}
		mu.Lock()
		defer mu.Unlock()
		if !ids[id] {
			ids[id] = true
			seen = append(seen, ffDispatch{at: time.Now(), class: h.Get("Dispatch-Class"), key: key, real: cost * f})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	startMock(t, connect(t, url), mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1,
		PrefillTokensPerSec: 20000, KeyCostFactors: factors})
	waitFor(t, 10*time.Second, "both dispatchers to see w1", func() bool {
		v1, ok1 := p1.queues()
		v2, ok2 := p2.queues()
		return ok1 && ok2 && v1.hasWorker("w1") && v2.hasWorker("w1")
	})

	// The backlog, interleaved at random.
	var todo []string
	for _, g := range []string{"premium/a", "premium/b", "regular/a", "regular/b"} {
		for range groups[g] {
			todo = append(todo, g)
		}
	}
	rand.New(rand.NewPCG(4, 9)).Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	msgs := make([]*nats.Msg, 0, len(todo))
	for i, g := range todo {
		m := nats.NewMsg("dispatch.req." + g[:len(g)-2])
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ff-%05d", i))
		m.Header.Set("Dispatch-ISL-Tokens", "512")
		m.Header.Set("Dispatch-Fairness-Key", g[len(g)-1:])
		msgs = append(msgs, m)
	}
	publishAll(t, js, msgs)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	waitFor(t, 30*time.Second, "6 s of dispatches by the leader", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && time.Since(seen[0].at) >= 6*time.Second
	})
	killed := time.Now()
	p1.kill()
	haWaitLead(t, p2, 20*time.Second)
	before := count()
	waitFor(t, 30*time.Second, "a dispatch by the new leader", func() bool { return count() > before })
	mu.Lock()
	first := seen[before].at
	mu.Unlock()
	waitFor(t, 30*time.Second, "5 s of dispatches by the new leader", func() bool { return time.Since(first) >= 5*time.Second })

	mu.Lock()
	var pre, post []ffDispatch
	for _, d := range seen {
		switch {
		case d.at.Before(killed) && killed.Sub(d.at) <= 5*time.Second:
			pre = append(pre, d)
		case !d.at.Before(first) && d.at.Sub(first) < 5*time.Second:
			post = append(post, d)
		}
	}
	mu.Unlock()
	prePremium, preB, _, preN := ffShares(pre)
	postPremium, postB, served, postN := ffShares(post)
	t.Logf("5 s before the SIGKILL (%d dispatches): premium %.3f of real cost (ideal 0.8), key b %.3f of premium, %.3f of regular (ideal 0.5)",
		preN, prePremium, preB["premium"], preB["regular"])
	t.Logf("5 s after the new leader's first dispatch (%d dispatches, %v after the kill): premium %.3f, key b %.3f of premium, %.3f of regular",
		postN, first.Sub(killed).Round(time.Millisecond), postPremium, postB["premium"], postB["regular"])
	if postN < 100 {
		t.Fatalf("only %d dispatches after the failover: the backlog ran out", postN)
	}
	for _, c := range []struct {
		name      string
		off, over float64
	}{
		{"premium's share", postPremium - 0.8, served[""]},
		{"b's share of premium", postB["premium"] - 0.5, served["premium"]},
		{"b's share of regular", postB["regular"] - 0.5, served["regular"]},
	} {
		bound := ffBound(c.over)
		t.Logf("after the failover %s is %+.3f off the ideal; bound %.3f (over %.0f cost units)", c.name, c.off, bound, c.over)
		if c.off > bound || c.off < -bound {
			t.Errorf("after the failover %s is %+.3f off the ideal, past the bound %.3f", c.name, c.off, bound)
		}
	}
}
