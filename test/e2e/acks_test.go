package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// acksPlain runs TestAcksAcrossEmbeddedRestart as its control: every worker
// acknowledges with plain publishes. It reports what ran twice and asserts
// nothing about it.
var acksPlain = flag.Bool("acks-plain", false, "TestAcksAcrossEmbeddedRestart: the control, with plain acknowledgements (reports duplicates, asserts none)")

// TestAcksAcrossEmbeddedRestart is issue 25's acceptance 3: a dispatcher
// running the embedded NATS server (the server every worker and producer
// uses) is restarted (SIGTERM, then started again on its data directory and
// port) in the middle of each of 5 runs of 300 requests, served by a worker
// of the Go helper, the mock worker and the Node example. Stopping the
// dispatcher stops the server: acknowledgements sent meanwhile, or flushed
// at reconnection before JetStream has recovered the consumer, are lost
// when plain. The workers acknowledge confirmed (the default, docs/protocol.md,
// After accepting) and remember what they finished; executions are counted
// at the workers, per request id. Every request runs, and none twice unless
// a handshake timeout explains it (docs/protocol.md, Accepting and refusing:
// a lost acceptance makes the dispatcher send the request again), counted.
//
// With -acks-plain the workers send plain acknowledgements: the control,
// which shows what the confirmed ones prevent.
func TestAcksAcrossEmbeddedRestart(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	node := nodeOrSkip(t)
	const runs, n = 5, 300
	const hold = 100 * time.Millisecond // per request; 4 at once per worker: about 120 requests/s in all
	natsAddr := freeAddr(t)
	url := "nats://" + natsAddr
	args := []string{"--nats-listen", natsAddr, "--data-dir", t.TempDir(), "--ack-wait", "10s",
		"--queue-threshold", "1", "--log-level", "debug"}
	p := startDispatcher(t, "", args...)
	procs := []*proc{p}
	nc := connect(t, url)
	js := jsOf(t, nc)

	// The Go helper: a handler that holds each request, then Done.
	gw := &akHelperWorker{hold: hold, runs: map[string]int{}}
	gnc := connect(t, url)
	w, err := workerkit.New(gnc, workerkit.Config{ID: "go-1", MaxActiveRequests: 4, PlainAcks: *acksPlain}, gw, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	gw.w = w
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	// The mock: its executions are its records (one per execution, in copies
	// with the same received_at ahead of each acknowledgement attempt),
	// watched on its own connection, which subscribes again before it
	// flushes what it buffered while disconnected.
	mnc := connect(t, url)
	mrec := akWatchRecords(t, mnc, "mock-1")
	m := startMock(t, mnc, mockworker.Config{ID: "mock-1", MaxNumSeqs: 4, MaxActiveRequests: 4, OutputTokens: 20,
		DecodePerToken: hold / 20, PlainAcks: *acksPlain})
	// The Node example logs what it does with each dispatch.
	env := []string{"MAX_ACTIVE=4", fmt.Sprintf("HOLD_MS=%d", hold.Milliseconds()), "LOG_REQUESTS=1"}
	if *acksPlain {
		env = append(env, "PLAIN_ACKS=1")
	}
	nodeOut := startNodeWorker(t, node, url, "node-1", env...)

	var totalDup, totalExcused int
	for run := range runs {
		waitLive(t, p, "go-1", "mock-1", "node-1")
		prefix := fmt.Sprintf("acks-%d-", run)
		mock0 := m.Stats().Accepted
		gs0, ms0 := w.Stats(), m.Helper().Stats()
		// All at once (one by one, on a loaded machine, the workers ran all
		// 300 while the last were still being published: no restart mid-run).
		msgs := make([]*nats.Msg, n)
		for i := range n {
			id := fmt.Sprintf("%s%03d", prefix, i)
			m := nats.NewMsg("dispatch.req.default")
			m.Header.Set(jetstream.MsgIDHeader, id)
			m.Header.Set(wire.HeaderISLTokens, "100")
			m.Data = []byte(id)
			msgs[i] = m
		}
		publishAll(t, js, msgs)
		executed := func() int {
			return gw.count(prefix) + akNodeRuns(nodeOut.String(), prefix).total + int(m.Stats().Accepted-mock0)
		}
		waitFor(t, 60*time.Second, fmt.Sprintf("run %d: a third of the requests run", run), func() bool { return executed() >= n/3 })
		p.signal(syscall.SIGTERM)
		if err := p.wait(30 * time.Second); err != nil {
			t.Fatalf("run %d: dispatcher exited with %v, want 0\n%s", run, err, tail(p.out.String(), 20))
		}
		atRestart := executed()
		if atRestart >= n {
			t.Errorf("run %d: all %d requests ran before the dispatcher stopped: not a restart mid-run", run, n)
		}
		p = startDispatcher(t, "", args...)
		procs = append(procs, p)

		// The run is over when every request ran and every message is
		// acknowledged (a lost acknowledgement keeps its message until the
		// ack wait redelivers it, and the redelivery runs or is answered).
		waitFor(t, 90*time.Second, fmt.Sprintf("run %d: every request run and acknowledged", run), func() bool {
			return executed() >= n && streamMsgs(t, js, "DISPATCH_REQ") == 0 &&
				(*acksPlain || len(akRunsOf(gw, nodeOut.String(), mrec, prefix)) == n)
		})
		if !*acksPlain {
			// The mock counts an execution when it accepts it, and publishes
			// its record when it finishes: an execution of a request that
			// ran elsewhere too (after a handshake timeout) may still run
			// once every request has run and the stream is empty. Wait for
			// the records of all it accepted rather than compare once.
			var got struct{ Records, Accepted int }
			natstest.Eventually(t, 30*time.Second, func() bool {
				got.Records, got.Accepted = mrec.executions(prefix), int(m.Stats().Accepted-mock0)
				return got.Records == got.Accepted
			}, "run %d: the mock's records of every execution it accepted (at the deadline: %+v)", run, &got)
		}
		runsByID := akRunsOf(gw, nodeOut.String(), mrec, prefix)
		timedOut := ecsTimedOut(procs...)
		var dups, excused []string
		for id, k := range runsByID {
			switch {
			case k > 1 && timedOut[id]:
				excused = append(excused, fmt.Sprintf("%s x%d", id, k))
			case k > 1:
				dups = append(dups, fmt.Sprintf("%s x%d", id, k))
			}
		}
		mockRuns := int(m.Stats().Accepted - mock0)
		nr := akNodeRuns(nodeOut.String(), prefix)
		total := gw.count(prefix) + nr.total + mockRuns
		gs, ms := akDelta(w.Stats(), gs0), akDelta(m.Helper().Stats(), ms0)
		fromMemory := int(gs.AlreadyFinished+ms.AlreadyFinished) + nr.finished
		t.Logf("run %d: restarted after %d of %d had run; executions: go %d, mock %d, node %d (%d in all, %d distinct); "+
			"ran twice: %d %v, of which explained by a handshake timeout: %d; dispatched again after finishing and answered "+
			"from the finished-request memory: %d; joined to a running execution: %d; the helpers' acknowledgements: go %s, mock %s",
			run, atRestart, n, gw.count(prefix), mockRuns, nr.total, total, len(runsByID), len(dups)+len(excused), append(dups, excused...),
			len(excused), fromMemory, int(gs.Joined+ms.Joined)+nr.joined, akAcks(gs), akAcks(ms))
		totalDup += len(dups)
		totalExcused += len(excused)
		if *acksPlain {
			continue
		}
		if len(runsByID) != n {
			t.Errorf("run %d: %d distinct requests ran (%d executions), want all %d", run, len(runsByID), total, n)
		}
		if k := mrec.executions(prefix); k != mockRuns {
			t.Errorf("run %d: the mock's records show %d executions, its stats %d", run, k, mockRuns)
		}
		if len(dups) > 0 {
			t.Errorf("run %d: %d requests ran more than once without a handshake timeout to explain it: %v", run, len(dups), dups)
		}
	}
	t.Logf("%d runs of %d requests, acknowledgements %s: %d ran twice unexplained, %d explained by a handshake timeout; "+
		"acknowledgements unconfirmed: go %d, mock %d", runs, n, map[bool]string{true: "plain", false: "confirmed"}[*acksPlain],
		totalDup, totalExcused, w.Stats().AcksUnconfirmed, m.Stats().AckFailures)
}

// akHelperWorker is a worker of the Go helper: it accepts every dispatch
// (the dispatcher sends it at most MaxActiveRequests), holds it, then Done,
// and counts its executions (Offer calls) per request id.
type akHelperWorker struct {
	w    *workerkit.Worker
	hold time.Duration

	mu     sync.Mutex
	active uint64
	runs   map[string]int
}

func (a *akHelperWorker) Offer(r *workerkit.Request) bool {
	a.mu.Lock()
	a.runs[r.RequestID]++
	a.active++
	_ = a.w.SetLoad(r.DPRank, workerkit.RankLoad{ActiveRequests: a.active, ActivePrefillTokens: 100 * a.active})
	a.mu.Unlock()
	time.AfterFunc(a.hold, func() {
		a.mu.Lock()
		a.active--
		_ = a.w.SetLoad(r.DPRank, workerkit.RankLoad{ActiveRequests: a.active, ActivePrefillTokens: 100 * a.active})
		a.mu.Unlock()
		_ = r.Done()
	})
	return true
}

// count returns the executions of requests whose id starts with prefix.
func (a *akHelperWorker) count(prefix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := 0
	for id, c := range a.runs {
		if strings.HasPrefix(id, prefix) {
			k += c
		}
	}
	return k
}

// akRecords are a mock worker's executions per request id: its completion
// records with output tokens (the helper's records of 0 tokens, for
// dispatches it answered without running them, are not executions),
// distinct by received_at (a record comes in copies, one ahead of each
// acknowledgement attempt).
type akRecords struct {
	mu   sync.Mutex
	seen map[string]map[time.Time]bool
}

func akWatchRecords(t *testing.T, nc *nats.Conn, id string) *akRecords {
	t.Helper()
	r := &akRecords{seen: map[string]map[time.Time]bool{}}
	onCompletion(t, nc, "dispatch.done."+id, func(c wire.Completion) {
		if c.OutputTokens == 0 {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen[c.RequestID] == nil {
			r.seen[c.RequestID] = map[time.Time]bool{}
		}
		r.seen[c.RequestID][c.ReceivedAt] = true
	})
	return r
}

// executions returns the executions of requests whose id starts with prefix.
func (r *akRecords) executions(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := 0
	for id, ts := range r.seen {
		if strings.HasPrefix(id, prefix) {
			k += len(ts)
		}
	}
	return k
}

// akNode is what the Node worker logged of one run's dispatches.
type akNode struct {
	runs                    map[string]int
	total, joined, finished int
}

// akNodeRuns reads the Node worker's LOG_REQUESTS lines for ids with prefix.
func akNodeRuns(out, prefix string) akNode {
	n := akNode{runs: map[string]int{}}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `"msg":"dispatch"`) || !strings.Contains(line, prefix) {
			continue
		}
		var l struct {
			ID     string `json:"request_id"`
			Action string `json:"action"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || !strings.HasPrefix(l.ID, prefix) {
			continue
		}
		switch l.Action {
		case "run":
			n.runs[l.ID]++
			n.total++
		case "joined":
			n.joined++
		case "finished":
			n.finished++
		}
	}
	return n
}

// akRunsOf returns the executions per request id of one run, at all three workers.
func akRunsOf(gw *akHelperWorker, nodeOut string, mrec *akRecords, prefix string) map[string]int {
	out := akNodeRuns(nodeOut, prefix).runs
	gw.mu.Lock()
	for id, k := range gw.runs {
		if strings.HasPrefix(id, prefix) {
			out[id] += k
		}
	}
	gw.mu.Unlock()
	mrec.mu.Lock()
	for id, ts := range mrec.seen {
		if strings.HasPrefix(id, prefix) {
			out[id] += len(ts)
		}
	}
	mrec.mu.Unlock()
	return out
}

// akDelta returns the helper's counters since s0.
func akDelta(s, s0 workerkit.Stats) workerkit.Stats {
	return workerkit.Stats{Joined: s.Joined - s0.Joined, AlreadyFinished: s.AlreadyFinished - s0.AlreadyFinished,
		AcksConfirmed: s.AcksConfirmed - s0.AcksConfirmed, AckRetries: s.AckRetries - s0.AckRetries,
		AcksUnconfirmed: s.AcksUnconfirmed - s0.AcksUnconfirmed, AcksPlain: s.AcksPlain - s0.AcksPlain}
}

// akAcks is the part of a helper's counters the test reports.
func akAcks(s workerkit.Stats) string {
	if s.AcksPlain > 0 {
		return fmt.Sprintf("%d plain", s.AcksPlain)
	}
	return fmt.Sprintf("%d confirmed (%d retries), %d unconfirmed", s.AcksConfirmed, s.AckRetries, s.AcksUnconfirmed)
}
