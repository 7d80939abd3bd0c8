package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
)

// blPolicy gives key a a token budget of rate cost units a second (burst one
// second of it); key b is unlimited.
const blPolicy = `default_policy_family: c
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - name: c
    policy_family: c
    cache_bucket: all
    quantum: 512
    prefill_busy_threshold: 1536
    key_budgets:
      a: {tokens_per_second: %d, burst: %d}
`

// TestBudgetChangeAppliesWithinASecond (issue 26, acceptance 1's last
// clause; docs/design.md, Token budgets, Live): key a's budget of 1,000
// tokens/s (two 500-token requests a second) is raised to 5,000 in the
// policy bucket while a and b are backlogged; in the second after the put
// returns a gets at least 4 dispatches, which the old budget (level near 0,
// 2 a second) cannot give, and the dispatcher reports the new revision.
func TestBudgetChangeAppliesWithinASecond(t *testing.T) {
	ns := startNATS(t)
	p := startDispatcher(t, ns.URL(), "--policy-config", writePolicy(t, fmt.Sprintf(blPolicy, 1000, 1000)))
	nc := connect(t, ns.URL())
	js := jsOf(t, nc)
	store := lpStore(t, js)
	var mu sync.Mutex
	var times []time.Time // dispatches of key a
	sub, err := nc.Subscribe("dispatch.work.w1", func(m *nats.Msg) {
		if dispatchHeader(t, m).Get("Dispatch-Fairness-Key") == "a" {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	startMock(t, connect(t, ns.URL()), mockworker.Config{ID: "w1", MaxNumSeqs: 4, OutputTokens: 1, PrefillTokensPerSec: 20000})
	waitLive(t, p, "w1")
	var msgs []*nats.Msg
	for i := range 400 {
		for _, key := range []string{"a", "b"} {
			m := nats.NewMsg("dispatch.req.c")
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bl-%s-%d", key, i))
			m.Header.Set("Dispatch-ISL-Tokens", "500")
			m.Header.Set("Dispatch-Fairness-Key", key)
			msgs = append(msgs, m)
		}
	}
	publishAll(t, js, msgs)
	count := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range times {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		return n
	}
	start := time.Now()
	waitFor(t, 20*time.Second, "3 s under the old budget", func() bool { return time.Since(start) >= 3*time.Second })
	old := count(start.Add(time.Second), start.Add(3*time.Second))
	if rev := lpPut(t, store, fmt.Sprintf(blPolicy, 5000, 5000)); rev != 2 {
		t.Fatalf("put revision %d, want 2", rev)
	}
	put := time.Now()
	waitFor(t, 10*time.Second, "a second after the put", func() bool { return time.Since(put) >= time.Second })
	after := count(put, put.Add(time.Second))
	var first time.Duration // the first dispatch of a closer than 300 ms to the one before: the new rate
	mu.Lock()
	for i := 1; i < len(times); i++ {
		if times[i].After(put) && times[i].Sub(times[i-1]) < 300*time.Millisecond {
			first = times[i].Sub(put)
			break
		}
	}
	mu.Unlock()
	lpWaitRevision(t, 2, p)
	t.Logf("key a: %d dispatches in 2 s under 1,000 tokens/s; %d in the second after the put of 5,000 tokens/s (first at the new rate %v after it)",
		old, after, first.Round(time.Millisecond))
	if old > 6 {
		t.Errorf("key a got %d dispatches in 2 s under its budget of 2 a second", old)
	}
	if after < 4 {
		t.Errorf("key a got %d dispatches in the second after the budget was raised, want >= 4", after)
	}
}
