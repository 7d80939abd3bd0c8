package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// Issue 15, a fleet outage (docs/design.md, Fleet outage): while no worker is
// live the dispatcher holds what it has, pulls nothing more, and fails nothing
// for want of workers; when a worker reports again it dispatches at once, in
// DRR order. With --no-workers-timeout the held requests fail as no_endpoints
// once the outage has lasted that long. Helpers carry the prefix out.

// outTTL is the workers' report TTL: short, so that an outage of 3 TTLs is short.
const outTTL = 500 * time.Millisecond

// outPerClass is the number of requests of each class in each of the two
// backlogs: the one queued before the outage and the one published during it.
const outPerClass = 100

// outNoLiveWorkers reports whether p answers /readyz 503 "no live workers".
func outNoLiveWorkers(p *proc) bool {
	code, body := p.get("/readyz")
	return code == http.StatusServiceUnavailable && strings.Contains(body, "no live workers")
}

// outCompletions collects the mock workers' completion records; for each
// request it keeps the one of the lowest Dispatch-Seq (the dispatch DRR
// charged; a handshake that timed out sends the request again, uncharged).
type outCompletions struct {
	mu   sync.Mutex
	byID map[string]wire.Completion
	recs int
}

func outCollect(t *testing.T, nc *nats.Conn) *outCompletions {
	t.Helper()
	c := &outCompletions{byID: map[string]wire.Completion{}}
	onCompletion(t, nc, "dispatch.done.*", func(r wire.Completion) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.recs++
		if old, ok := c.byID[r.RequestID]; !ok || r.Seq < old.Seq {
			c.byID[r.RequestID] = r
		}
	})
	return c
}

func (c *outCompletions) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byID[id]
	return ok
}

// order returns the classes of worker w's dispatches in Dispatch-Seq order.
func (c *outCompletions) order(w string) []string {
	c.mu.Lock()
	var rs []wire.Completion
	for _, r := range c.byID {
		if r.WorkerID == w {
			rs = append(rs, r)
		}
	}
	c.mu.Unlock()
	sort.Slice(rs, func(i, j int) bool { return rs[i].Seq < rs[j].Seq })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Class
	}
	return out
}

// outWorker is a mock worker on its own connection, with the short TTL.
type outWorker struct {
	id string
	nc *nats.Conn
	w  *mockworker.Worker
}

func outStartWorker(t *testing.T, url, id string, draining bool) *outWorker {
	t.Helper()
	ow := &outWorker{id: id, nc: haConnect(t, url)}
	ow.start(t, draining)
	return ow
}

// start starts a new instance of the worker on its connection.
func (ow *outWorker) start(t *testing.T, draining bool) {
	t.Helper()
	ow.w = newMock(t, ow.nc, mockworker.Config{ID: ow.id, TTL: outTTL, OutputTokens: 1, DecodePerToken: time.Millisecond}, draining)
}

// stop stops the worker: a last (draining) report, then silence.
func (ow *outWorker) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = ow.w.Stop(ctx)
}

// outPublish publishes n requests of each class, alternately, with ids
// <run>-premium-i and <run>-regular-i, and returns the ids.
func outPublish(t *testing.T, js jetstream.JetStream, run string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		for _, c := range []string{"premium", "regular"} {
			id := fmt.Sprintf("%s-%s-%d", run, c, i)
			publish(t, js, "dispatch.req."+c, id, map[string]string{"Dispatch-ISL-Tokens": "100", "Dispatch-Output-Tokens": "1"}, []byte(id))
			ids = append(ids, id)
		}
	}
	return ids
}

// outSplitBound is how far DRR may stray from the quanta over a prefix of N
// dispatches while both classes stay backlogged, for this file's policy. A
// class's deficit stays in [0, cost + quantum) (drr/arbiter.go, step 4's
// comment), and the two classes are credited in alternation, their rounds
// differing by at most one (Shreedhar and Varghese 1995, lemma 2). With cost
// c = 100, quanta 400 and 100, premium sends n_p = 4 m_p + e_p, regular
// n_r = m_r + e_r, with |m_p - m_r| <= 1, |e_p| < (c + 400)/c = 5 and
// |e_r| < (c + 100)/c = 2; so |n_p - 4 n_r| < 4 + 5 + 4 x 2 = 17, that is
// |5 n_p - 4 N| < 17: n_p lies within 3.4 of 4N/5. Each handshake that was
// refused or timed out sends one request again, uncharged, later in the
// sequence, which moves the count of a prefix by at most one more.
func outSplitBound(redispatches int) float64 { return 17.0/5 + float64(redispatches) }

// outCheckSplit checks the classes of the first n dispatches to worker w
// against the quanta 400:100 (docs/design.md, DRR).
func outCheckSplit(t *testing.T, p *proc, comps *outCompletions, w string, n int) {
	t.Helper()
	order := comps.order(w)
	if len(order) < n {
		t.Fatalf("%d dispatches to %s, want at least %d", len(order), w, n)
	}
	premium := 0
	for _, c := range order[:n] {
		if c == "premium" {
			premium++
		}
	}
	redispatches := int(p.metric("fairdispatch_handshakes_total", `outcome="refused"`) + p.metric("fairdispatch_handshakes_total", `outcome="timeout"`))
	want, bound := 0.8*float64(n), outSplitBound(redispatches)
	t.Logf("first %d dispatches to %s after the return: premium %d regular %d (want %.0f +- %.1f; %d handshakes sent again); order %s",
		n, w, premium, n-premium, want, bound, redispatches, outAbbrev(order[:n]))
	if d := float64(premium) - want; d > bound || -d > bound {
		t.Errorf("premium among the first %d dispatches after the return = %d, want %.0f +- %.1f (quanta 400:100)", n, premium, want, bound)
	}
}

// outAbbrev writes a class sequence as P and R.
func outAbbrev(classes []string) string {
	var b strings.Builder
	for _, c := range classes {
		b.WriteByte(strings.ToUpper(c[:1])[0])
	}
	return b.String()
}

// outLogLines returns p's log lines whose message contains msg.
func outLogLines(p *proc, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.out.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil {
			if m, _ := l["message"].(string); strings.Contains(m, msg) {
				out = append(out, l)
			}
		}
	}
	return out
}

const (
	outBeginLog = "no live workers"
	outEndLog   = "a worker is live again"
)

// outFixture is the start of every scenario: two draining workers (live,
// taking nothing) and a dispatcher, or a leader and a standby, holding the
// first backlog of outPerClass requests of each class.
type outFixture struct {
	url      string
	js       jetstream.JetStream
	comps    *outCompletions
	p        *proc // the leader
	standby  *proc // nil without failover
	workers  []*outWorker
	backlog1 []string
}

func outStart(t *testing.T, standby bool, extra ...string) *outFixture {
	t.Helper()
	ns := startNATS(t)
	f := &outFixture{url: ns.URL()}
	f.js = jsOf(t, connect(t, f.url))
	f.comps = outCollect(t, connect(t, f.url))
	// The workers report first, so that the dispatcher sees them within its
	// grace: the only outage in the log is the test's.
	for _, id := range []string{"w1", "w2"} {
		f.workers = append(f.workers, outStartWorker(t, f.url, id, true))
	}
	args := append([]string{"--policy-config", policyFile(t, "outage")}, extra...)
	if standby {
		args = append(args, "--lease-ttl", "1s")
		f.p = startDispatcher(t, f.url, append(args, "--instance-id", "d1")...)
		f.standby = launch(t, f.url, append(args, "--instance-id", "d2")...)
		haWaitStandby(t, f.standby)
	} else {
		f.p = startDispatcher(t, f.url, args...)
	}
	waitFor(t, 10*time.Second, "both workers live and draining", func() bool {
		v, ok := f.p.queues()
		return ok && len(v.Workers) == 2 && v.Workers[0].Draining && v.Workers[1].Draining
	})
	if outNoLiveWorkers(f.p) {
		t.Fatal("/readyz says no live workers with two live")
	}
	f.backlog1 = outPublish(t, f.js, "b1", outPerClass)
	waitFor(t, 20*time.Second, "the first backlog held", func() bool {
		v, ok := f.p.queues()
		return ok && v.pendingTotal() == 2*outPerClass
	})
	return f
}

// stopWorkers stops both workers and returns when it started to: no report
// reaches the dispatcher after that, but for the last ones Stop sends.
func (f *outFixture) stopWorkers() time.Time {
	at := time.Now()
	for _, w := range f.workers {
		w.stop()
	}
	return at
}

// waitOutage waits until p says no worker is live.
func waitOutage(t *testing.T, p *proc) {
	t.Helper()
	waitFor(t, 10*time.Second, "/readyz 503 no live workers", func() bool { return outNoLiveWorkers(p) })
	waitFor(t, 5*time.Second, "the live workers gauge at 0", func() bool { return p.metric("fairdispatch_live_workers") == 0 })
}

// TestOutageHoldsAndResumesInDRROrder is acceptance 1 of issue 15 (and 3,
// with a failover): a backlog in two classes, both workers stop for 3 TTLs
// while more requests arrive, then one returns. Every request completes, the
// DLQ stays empty, and the split after the return follows the quanta.
func TestOutageHoldsAndResumesInDRROrder(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	t.Run("one dispatcher", func(t *testing.T) { outHoldAndResume(t, false) })
	t.Run("leader failover during the outage", func(t *testing.T) { outHoldAndResume(t, true) })
}

func outHoldAndResume(t *testing.T, failover bool) {
	f := outStart(t, failover)
	// Log lines of an outage at start-up (workers not yet seen after the grace)
	// do not count.
	begin0 := [2]int{len(outLogLines(f.p, outBeginLog)), len(outLogLines(f.p, outEndLog))}
	if failover {
		begin0 = [2]int{len(outLogLines(f.standby, outBeginLog)), len(outLogLines(f.standby, outEndLog))}
	}
	stopAt := f.stopWorkers()
	waitOutage(t, f.p)
	backlog2 := outPublish(t, f.js, "b2", outPerClass)

	p := f.p
	if failover {
		v, _ := p.queues()
		p.kill()
		t.Logf("leader killed holding %d requests; the standby takes over", v.Held)
		p = f.standby
		haWaitLead(t, p, 20*time.Second)
		waitOutage(t, p)
	}
	// The outage lasts 3 TTLs: meanwhile nothing is dead-lettered.
	for time.Since(stopAt) < 3*outTTL {
		if n := streamMsgs(t, f.js, "DISPATCH_DLQ"); n != 0 {
			t.Fatalf("%d requests dead-lettered during the outage, want 0", n)
		}
		if !outNoLiveWorkers(p) {
			t.Fatal("/readyz stopped saying no live workers before a worker returned")
		}
		time.Sleep(50 * time.Millisecond) // the outage's length is the point here
	}
	var returnAt time.Time
	if failover {
		// The new leader took over during the outage and pulled nothing: it
		// holds nothing; the old leader's requests come back to the stream
		// when their ack wait runs out. Bring the worker back draining, so
		// that the new leader queues everything before it dispatches: the split
		// below then measures DRR alone, as with one dispatcher, not the
		// arrivals that find an idle worker.
		waitFor(t, 10*time.Second, "the new leader to hold nothing and pull nothing", func() bool {
			v, ok := p.queues()
			return ok && v.Held == 0 && consumerInfo(t, f.js).NumWaiting == 0
		})
		f.workers[0].start(t, true)
		returnAt = time.Now()
		waitFor(t, 30*time.Second, "the new leader to hold both backlogs", func() bool {
			v, ok := p.queues()
			return ok && v.pendingTotal() == 4*outPerClass
		})
		if n := streamMsgs(t, f.js, "DISPATCH_DLQ"); n != 0 {
			t.Fatalf("%d requests dead-lettered, want 0", n)
		}
		f.workers[0].w.Helper().SetDraining(false)
	} else {
		f.workers[0].start(t, false)
		returnAt = time.Now()
	}

	all := append(append([]string(nil), f.backlog1...), backlog2...)
	waitFor(t, 60*time.Second, "every request completed", func() bool {
		for _, id := range all {
			if !f.comps.has(id) {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "the request stream empty", func() bool { return streamMsgs(t, f.js, "DISPATCH_REQ") == 0 })
	if n := streamMsgs(t, f.js, "DISPATCH_DLQ"); n != 0 {
		t.Errorf("DISPATCH_DLQ holds %d requests, want 0", n)
	}
	outCheckSplit(t, p, f.comps, "w1", outPerClass)

	// One warning when the outage began, one info when it ended, with its
	// length and the backlog.
	begin, end := outLogLines(p, outBeginLog)[begin0[0]:], outLogLines(p, outEndLog)[begin0[1]:]
	t.Logf("outage: %d begin and %d end log lines: %v; %v; workers stopped at %v, one back %v later",
		len(begin), len(end), begin, end, stopAt.Format("15:04:05.000"), returnAt.Sub(stopAt).Round(time.Millisecond))
	if len(begin) != 1 || begin[0]["level"] != "warn" {
		t.Errorf("outage begin logs = %v, want one warn", begin)
	}
	if len(end) != 1 || end[0]["level"] != "info" || end[0]["outage"] == nil || end[0]["held"] == nil {
		t.Errorf("outage end logs = %v, want one info with the outage's length and the held backlog", end)
	}
}

// TestOutageNoWorkersTimeout is acceptance 2 of issue 15 (and 3, with a
// failover): with --no-workers-timeout 2s, the requests held are
// dead-lettered as no_endpoints once the outage has lasted 2 s, not before;
// the requests still in the stream stay there until a worker returns, and then
// complete.
func TestOutageNoWorkersTimeout(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	t.Run("one dispatcher", func(t *testing.T) { outTimeout(t, false) })
	t.Run("leader failover after the timeout", func(t *testing.T) { outTimeout(t, true) })
}

func outTimeout(t *testing.T, failover bool) {
	const timeout = 2 * time.Second
	f := outStart(t, failover, "--no-workers-timeout", timeout.String())
	stopAt := f.stopWorkers()
	waitOutage(t, f.p)
	var since time.Time
	waitFor(t, 5*time.Second, "/debug/queues to show the outage and its start", func() bool {
		v, ok := f.p.queues()
		if ok && v.NoLiveWorkers && v.OutageSince != nil {
			since = *v.OutageSince
		}
		return !since.IsZero()
	})
	// The pull open when the outage began runs to its end; then none is open.
	waitFor(t, 10*time.Second, "no pull open", func() bool { return consumerInfo(t, f.js).NumWaiting == 0 })
	backlog2 := outPublish(t, f.js, "b2", outPerClass)

	// Every request ends up dead-lettered or still in the stream, none held:
	// the first backlog once the outage has lasted the timeout, and any of the
	// second that a pull still open when the gate closed brought in
	// (docs/decisions.md: at most one batch; usually none, since none was open).
	in1 := map[string]bool{}
	for _, id := range f.backlog1 {
		in1[id] = true
	}
	var pending uint64
	waitFor(t, 30*time.Second, "every held request dead-lettered, the rest in the stream", func() bool {
		i := consumerInfo(t, f.js)
		pending = i.NumPending
		return i.NumAckPending == 0 && streamMsgs(t, f.js, "DISPATCH_DLQ")+i.NumPending == uint64(4*outPerClass) &&
			streamMsgs(t, f.js, "DISPATCH_REQ") == i.NumPending
	})
	pulled := 2*outPerClass - int(pending) // of the second backlog, by the pull open when the outage began
	first := time.Time{}
	dead := map[string]bool{}
	for _, m := range streamAll(t, f.js, "DISPATCH_DLQ") {
		id := m.Header.Get("Dispatch-Request-Id")
		dead[id] = true
		if m.Header.Get("Dispatch-Error") != "no_endpoints" {
			t.Errorf("dead letter %s: %s, want no_endpoints", id, m.Header.Get("Dispatch-Error"))
		}
		if first.IsZero() || m.Time.Before(first) {
			first = m.Time
		}
	}
	for id := range in1 {
		if !dead[id] {
			t.Errorf("request %s of the first backlog (held) not dead-lettered", id)
		}
	}
	// The outage began after the workers' last report, which came after
	// stopAt: at least a TTL after stopAt.
	t.Logf("first dead letter %v after the workers stopped, %v after the outage began (timeout %v, worker TTL %v); "+
		"%d of the second backlog pulled by the pull open when the outage began, %d left in the stream",
		first.Sub(stopAt).Round(time.Millisecond), first.Sub(since).Round(time.Millisecond), timeout, outTTL, pulled, pending)
	if first.Before(since.Add(timeout)) || first.Before(stopAt.Add(outTTL+timeout)) {
		t.Errorf("first dead letter at %v: before the outage (since %v, workers stopped %v) had lasted %v",
			first.Format("15:04:05.000"), since.Format("15:04:05.000"), stopAt.Format("15:04:05.000"), timeout)
	}
	if pulled < 0 || pulled > 256 {
		t.Errorf("%d of the second backlog pulled during the outage, want at most one batch (256)", pulled)
	}

	p := f.p
	if failover {
		p.kill()
		p = f.standby
		haWaitLead(t, p, 20*time.Second)
		waitOutage(t, p)
	}
	// The second backlog is still in the stream, past the timeout (and on a
	// new leader): until a worker returns, it is not pulled.
	for range 10 {
		if i := consumerInfo(t, f.js); i.NumPending != pending || i.NumAckPending != 0 {
			t.Fatalf("before the return: consumer pending %d, ack pending %d; want %d, 0", i.NumPending, i.NumAckPending, pending)
		}
		time.Sleep(100 * time.Millisecond) // watch for a second: nothing may be pulled
	}
	f.workers[0].start(t, false)
	waitFor(t, 60*time.Second, "the rest of the second backlog completed", func() bool {
		for _, id := range backlog2 {
			if !dead[id] && !f.comps.has(id) {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "the request stream empty", func() bool { return streamMsgs(t, f.js, "DISPATCH_REQ") == 0 })
	if n := streamMsgs(t, f.js, "DISPATCH_DLQ"); n != uint64(len(dead)) {
		t.Errorf("DISPATCH_DLQ holds %d requests, want %d", n, len(dead))
	}
	for id := range dead {
		if f.comps.has(id) {
			t.Errorf("dead-lettered request %s also completed", id)
		}
	}
}

// TestOutageMemoryBounded is acceptance 4 of issue 15: with no worker and a
// stream backlog larger than --max-held, the dispatcher holds at most
// --max-held, kept alive across several ack waits, and the rest stays in the
// stream; when a worker comes, everything completes.
func TestOutageMemoryBounded(t *testing.T) {
	const maxHeld, n = 50, 300 // n per class
	ns := startNATS(t)
	url := ns.URL()
	js := jsOf(t, connect(t, url))
	comps := outCollect(t, connect(t, url))
	// A draining worker (live, taking nothing) has the dispatcher pull up to
	// --max-held of the backlog; then it stops, and the fleet is out.
	w := outStartWorker(t, url, "w1", true)
	p := startDispatcher(t, url, "--policy-config", policyFile(t, "outage"), "--max-held", fmt.Sprint(maxHeld),
		"--ack-wait", "2s", "--dispatch-timeout", "1s")
	waitLive(t, p, "w1")
	first := outPublish(t, js, "big", n)
	waitFor(t, 20*time.Second, "the dispatcher holding --max-held", func() bool {
		v, ok := p.queues()
		return ok && v.Held == maxHeld
	})
	w.stop()
	waitOutage(t, p)
	more := outPublish(t, js, "more", n/2)
	total := len(first) + len(more)

	// Three ack waits: held requests are kept alive, not redelivered; the
	// count held never passes max-held, the rest stays in the stream.
	peak := 0
	for start := time.Now(); time.Since(start) < 6*time.Second; time.Sleep(100 * time.Millisecond) {
		v, ok := p.queues()
		if !ok {
			continue
		}
		held := int(p.metric("fairdispatch_held_messages"))
		peak = max(peak, v.Held, held)
		if v.Held > maxHeld || held > maxHeld {
			t.Fatalf("held %d (gauge %d) during the outage, want at most --max-held %d", v.Held, held, maxHeld)
		}
		if i := consumerInfo(t, js); int(i.NumPending)+i.NumAckPending != total || int(i.NumPending) < total-maxHeld {
			t.Fatalf("consumer pending %d, ack pending %d; want the %d requests, at least %d still in the stream",
				i.NumPending, i.NumAckPending, total, total-maxHeld)
		}
	}
	if peak != maxHeld {
		t.Errorf("held peaked at %d during the outage, want --max-held %d", peak, maxHeld)
	}
	if r := p.metric("fairdispatch_redelivered_messages_total"); r != 0 {
		t.Errorf("%v held messages redelivered during the outage, want 0 (kept alive)", r)
	}
	if n := streamMsgs(t, js, "DISPATCH_DLQ"); n != 0 {
		t.Errorf("%d dead letters during the outage, want 0", n)
	}
	w.start(t, false)
	waitFor(t, 60*time.Second, "every request completed", func() bool {
		if v, ok := p.queues(); ok && v.Held > maxHeld {
			t.Fatalf("held %d after the return, want at most %d", v.Held, maxHeld)
		}
		for _, id := range append(append([]string(nil), first...), more...) {
			if !comps.has(id) {
				return false
			}
		}
		return true
	})
	if n := streamMsgs(t, js, "DISPATCH_DLQ"); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}
