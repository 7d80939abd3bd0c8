package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fairdispatch/internal/natstest"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// TestCrashNothingLost: 5,000 requests queued in the dispatcher or in flight at
// three mock workers; the dispatcher is SIGKILLed mid-run and a new one started
// on the same NATS (docs/design.md, Delivery guarantees, dispatcher crash). Every request completes (or is
// dead-lettered), none twice: requests accepted by workers are not disturbed,
// the ones the dead dispatcher held come back after the ack wait. The request
// stream ends empty.
func TestCrashNothingLost(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const n = 5000
	f := newFixture(t) // f.nc: the test's own view of completions
	ns, ncT, js := f.ns, f.nc, f.js
	ncW := connect(t, ns.URL()) // workers
	ncL := connect(t, ns.URL()) // loadgen

	// Every completion record, duplicates included.
	var mu sync.Mutex
	done := map[string]int{}
	var records atomic.Int64
	onCompletion(t, ncT, "dispatch.done.*", func(c wire.Completion) {
		mu.Lock()
		done[c.RequestID]++
		mu.Unlock()
		records.Add(1)
	})

	// The default class queues once a worker has more than 5% of 8192 = 409
	// prefill tokens: about four requests of 100 tokens per worker; the rest
	// wait in the dispatcher.
	args := []string{"--queue-threshold", "0.05", "--log-level", "debug"}
	p1 := startDispatcher(t, ns.URL(), args...)
	var workers []*mockworker.Worker
	for i := 1; i <= 3; i++ {
		workers = append(workers, startMock(t, ncW, mockworker.Config{
			ID: fmt.Sprintf("w%d", i), PrefillTokensPerSec: 10000, DecodePerToken: 5 * time.Millisecond,
		}))
		waitLive(t, p1, fmt.Sprintf("w%d", i))
	}

	var progress atomic.Pointer[loadgen.Progress]
	start := time.Now()
	run := startLoad(t, ncL, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "default", Count: n}}, ISL: 100, OutputTokens: 3,
		RunID: "crash", Timeout: 80 * time.Second, ProgressInterval: 20 * time.Millisecond,
		OnProgress: func(p loadgen.Progress) { progress.Store(&p) },
	})

	// Kill once everything is published and some has completed, while most remains.
	waitFor(t, 60*time.Second, "all published and 500 completed", func() bool {
		p := progress.Load()
		return p != nil && p.Published == n && records.Load() >= 500
	})
	v, _ := p1.queues() // up to a second old
	p1.kill()
	killAt := time.Now()
	atKill := records.Load()
	t.Logf("SIGKILL after %v: %d completed, %d remaining; last view of the dead dispatcher: held %d, in flight %d",
		killAt.Sub(start).Round(time.Millisecond), atKill, n-atKill, v.Held, v.InFlight)
	if n-atKill < 2000 {
		t.Fatalf("only %d requests remained at the kill; the run is too fast to test a crash mid-run", n-atKill)
	}

	p2 := startDispatcher(t, ns.URL(), args...)
	readyIn := time.Since(killAt)
	// The held requests come back when their ack wait (4 s) runs out.
	waitFor(t, 30*time.Second, "the second dispatcher to dispatch", func() bool {
		return p2.metric("fairdispatch_dispatched_total") > 0
	})
	t.Logf("second dispatcher ready %v after the kill, first dispatch %v after the kill",
		readyIn.Round(time.Millisecond), time.Since(killAt).Round(time.Millisecond))
	res := run.wait(t, 85*time.Second)
	t.Logf("all ended %v after the kill (run %v): %d completed, %d rejected, loadgen duplicates %d; second dispatcher redelivered=%v dispatched=%v",
		time.Since(killAt).Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), len(res.Completions), len(res.Rejected),
		res.Duplicates, p2.metric("fairdispatch_redelivered_messages_total"), p2.metric("fairdispatch_dispatched_total"))

	// Let the workers finish whatever they still hold, so that a late duplicate
	// would be counted, then check the request stream empties.
	for _, w := range workers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop worker: %v", err)
		}
		cancel()
	}
	waitFor(t, 20*time.Second, "DISPATCH_REQ to be empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	if err := ncT.Flush(); err != nil {
		t.Fatal(err)
	}

	dlq := map[string]string{}
	for _, m := range streamAll(t, js, "DISPATCH_DLQ") {
		dlq[m.Header.Get("Dispatch-Request-Id")] = m.Header.Get("Dispatch-Error")
	}
	// The flush only has ncT read what the server sent it: the records'
	// callback runs on a goroutine of its own and may trail loadgen's (on
	// another connection), which ended the run. Wait until every request has
	// a record or a dead letter rather than count them once.
	var left struct {
		N  int
		Eg []string
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		left.N, left.Eg = 0, left.Eg[:0]
		for i := range n {
			if id := fmt.Sprintf("crash-%d", i); done[id] == 0 && dlq[id] == "" {
				if left.N++; left.N <= 10 {
					left.Eg = append(left.Eg, id)
				}
			}
		}
		return left.N == 0
	}, "every request completed or dead-lettered (neither at the deadline: %+v)", &left)
	mu.Lock()
	defer mu.Unlock()
	timedOut := ecsTimedOut(p1, p2)
	var missing, dups, excused []string
	for i := range n {
		id := fmt.Sprintf("crash-%d", i)
		switch c := done[id]; {
		case c == 0 && dlq[id] == "":
			missing = append(missing, id)
		case c > 1 && timedOut[id]:
			excused = append(excused, fmt.Sprintf("%s x%d", id, c))
		case c > 1:
			dups = append(dups, fmt.Sprintf("%s x%d", id, c))
		}
	}
	t.Logf("completion records %d for %d distinct requests; DLQ %d %v; duplicates %d (loadgen: %d), of which %d after a "+
		"handshake timeout (docs/protocol.md, Dispatch handshake, %d timeouts logged) %v",
		records.Load(), len(done), len(dlq), dlq, len(dups)+len(excused), res.Duplicates, len(excused), len(timedOut), excused[:min(10, len(excused))])
	if len(missing) > 0 {
		t.Errorf("%d requests neither completed nor dead-lettered, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	// docs/design.md, Delivery guarantees: a dispatcher crash does not disturb requests accepted by workers.
	if len(dups) > 0 {
		t.Errorf("%d requests completed more than once without a handshake timeout to explain it, e.g. %v", len(dups), dups[:min(10, len(dups))])
	}
}
