package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"fairdispatch/engineworker"
	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// engineChat sends one chat request straight to the engine (the cache
// changes it makes reach the index through the engine's KV events).
func engineChat(t *testing.T, fe *fleetEngine, family, id int) {
	t.Helper()
	msgs := []fakeengine.Message{{Role: "system", Content: strings.Repeat(fmt.Sprintf("family%d ", family), 60)},
		{Role: "user", Content: fmt.Sprintf("question %d please", id)}}
	if _, err := engineworker.Call(t.Context(), http.DefaultClient, "http://"+fe.addr, "chat.completions",
		chatRequest(msgs, 1, false, false), -1, func([]byte, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestEngineRestartSeenByIndex is issue 24's acceptance 3: the dispatcher's
// KV index (fairdispatch_kv_index_blocks) follows one engine's cache, built
// from its ZMQ events by the engine worker, through
//   - AllBlocksCleared (vLLM's reset_prefix_cache): the index empties within 1 s;
//   - the engine process dying (its port refuses: the worker's next health
//     check clears the rank) and a new one starting: empty within 1 s, then
//     the new process's events (sequence from 0) are followed;
//   - a gap in the ZMQ sequence (the engine drops a batch on purpose): the
//     worker replays it from the engine's replay socket, and the index holds
//     the dropped batch's blocks too.
func TestEngineRestartSeenByIndex(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	p := startDispatcher(t, ns.URL(), "--leader-election=false", "--kv-index")
	fe := startFleet(t, nc, 1, fakeengine.Config{}, engineworker.Config{})[0]
	indexed := func() float64 { return p.metric("fairdispatch_kv_index_blocks") }
	follows := func(what string) {
		t.Helper()
		waitFor(t, 10*time.Second, what+": the index holds the engine's blocks", func() bool {
			n := fe.e.Stats().CachedBlocks
			return n > 0 && indexed() == float64(n)
		})
	}
	cleared := func(what string, since time.Time) time.Duration {
		t.Helper()
		waitFor(t, 10*time.Second, what+": the index empty", func() bool { return indexed() == 0 })
		d := time.Since(since)
		if d > time.Second {
			t.Errorf("%s: the index emptied after %v, want within 1 s", what, d)
		}
		return d
	}
	for i := range 3 {
		engineChat(t, fe, i, i)
	}
	follows("at start")

	fe.e.Restart(true)
	byEvent := cleared("AllBlocksCleared", time.Now())
	engineChat(t, fe, 7, 7)
	follows("after AllBlocksCleared")

	killed := time.Now()
	fe.killEngine()
	byHealth := cleared("the engine process gone", killed)
	fe.startEngine()
	waitFor(t, 10*time.Second, "the worker healthy again", func() bool {
		v, ok := workerView(p, fe.id)
		return ok && !v.Draining
	})
	engineChat(t, fe, 8, 8)
	engineChat(t, fe, 9, 9)
	follows("the new process")

	before := fe.w.Stats()
	fe.e.DropEvents(1)
	engineChat(t, fe, 10, 10) // its BlockStored is not published
	engineChat(t, fe, 11, 11) // shows the gap
	follows("after the gap")
	after := fe.w.Stats()
	if after.Gaps != before.Gaps+1 || after.Replays <= before.Replays || after.Resets != before.Resets {
		t.Fatalf("worker stats %+v then %+v: want one gap healed by a replay, no reset", before, after)
	}
	if stale := p.metric("fairdispatch_kv_stale_ranks"); stale != 0 {
		t.Fatalf("%v stale ranks", stale)
	}
	t.Logf("index empty after AllBlocksCleared in %v, after the engine died in %v (health interval %v); the gap healed by %d replay(s)",
		byEvent, byHealth, fe.w.Config().HealthInterval, after.Replays-before.Replays)
}

// TestEngineHang is issue 24's acceptance 4: one of two engines hangs
// (accepts TCP, never answers) while requests run on both. Its worker
// reports draining within the health period (HealthInterval + HealthFailures
// x HealthTimeout, 2.5 s by default) and the dispatcher sends it nothing
// more; of its running requests, those whose producer had seen no chunk
// are handed back and answered by the other engine, the others end with
// status failed; every request ends, none after its deadline (30 s).
func TestEngineHang(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	p := startDispatcher(t, ns.URL(), "--leader-election=false", "--queue-threshold", "1")
	// The workers take 4 requests each where the engines run 2 (as a worker
	// whose --max-num-seqs is above the engine's would): requests wait in
	// the engine, before their first chunk, when it hangs.
	fleet := startFleet(t, nc, 2, fakeengine.Config{MaxNumSeqs: 2, PrefillTokensPerSec: 20000, DecodePerToken: 10 * time.Millisecond},
		engineworker.Config{MaxNumSeqs: 4})
	waitFor(t, 30*time.Second, "two live engine workers", func() bool { return p.metric("fairdispatch_live_workers") == 2 })
	hung := fleet[0]
	c := newRespCaller(t, nc)
	const n, deadline = 24, 30 * time.Second
	var calls []*respCall
	for i := range n {
		msgs := []fakeengine.Message{{Role: "user", Content: strings.Repeat(fmt.Sprintf("w%d ", i), 200+(i%4)*200)}}
		h := chatHeader("", msgs)
		h.Set(wire.HeaderDeadlineMs, fmt.Sprint(deadline.Milliseconds()))
		calls = append(calls, c.start(fmt.Sprint("hang-", i), "default", h, chatRequest(msgs, 100, true, false)))
	}
	waitFor(t, 30*time.Second, "the engine to hang busy, with requests before and past their first chunk", func() bool {
		if hung.e.Stats().Waiting == 0 {
			return false
		}
		for _, call := range calls {
			if end, chunks, _ := call.result(); end == nil && len(chunks) > 0 && call.worker() == hung.id {
				hung.e.Hang(true) // at once: a stream seen mid-way is frozen mid-way
				return true
			}
		}
		return false
	})
	hungAt := time.Now()
	waitFor(t, 30*time.Second, "the dispatcher sees the hung engine's worker draining", func() bool {
		v, ok := workerView(p, hung.id)
		return ok && v.Draining
	})
	drained := time.Since(hungAt)
	period := hung.w.Config().HealthPeriod()
	if drained > 2*period+time.Second { // the view is built once a second
		t.Errorf("draining seen %v after the hang, want within the health period (%v) and the view's second", drained, period)
	}
	handedBack, failed, okOther := 0, 0, 0
	for _, call := range calls {
		if err := call.wait(deadline + 10*time.Second); err != nil {
			t.Fatalf("%v: a request waits past its deadline", err)
		}
		end, chunks, broken := call.result()
		if broken != "" {
			t.Fatalf("%s: broken stream: %s", call.id, broken)
		}
		if call.ended.Sub(call.started) > deadline {
			t.Errorf("%s ended %v after it was sent, past its deadline %v", call.id, call.ended.Sub(call.started), deadline)
		}
		call.mu.Lock()
		claims := call.claims
		call.mu.Unlock()
		switch {
		case end.Status == wire.EndOK && call.worker() == fleet[1].id && claims > 1:
			handedBack++ // claimed on the hung engine first, answered by the other
		case end.Status == wire.EndOK:
			okOther++
		case end.Status == wire.EndFailed && call.worker() == hung.id && len(chunks) > 0:
			failed++
		default:
			t.Errorf("%s: end %+v after %d chunks from %s", call.id, end, len(chunks), call.worker())
		}
	}
	t.Logf("hung engine's worker draining after %v (health period %v); %d requests handed back before their first chunk and answered by %s, %d failed after it, %d answered elsewhere",
		drained, period, handedBack, fleet[1].id, failed, okOther)
	if handedBack == 0 || failed == 0 {
		t.Fatalf("want requests both handed back (%d) and failed (%d); worker stats %+v", handedBack, failed, hung.w.Stats())
	}
	// The worker counts a failed request after its end marker and
	// acknowledgement, which end the call, and a handed-back one after its
	// -NAK: wait for its counters rather than read them once.
	var st engineworker.Stats
	natstest.Eventually(t, 10*time.Second, func() bool {
		st = hung.w.Stats()
		return st.HandedBack == uint64(handedBack) && st.Failed == uint64(failed)
	}, "the hung engine's worker to count %d handed back and %d failed (its stats at the deadline: %+v)", handedBack, failed, &st)
	t.Logf("hung engine's worker stats %+v", st)
}
