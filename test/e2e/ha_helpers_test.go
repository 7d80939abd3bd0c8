package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// Helpers shared by cluster_test.go, ha_test.go and soak_test.go (issue 5:
// failover, node loss, worker loss, restarts) carry the prefix ha so that they
// cannot collide with other e2e files.

// haConnect connects to the comma-separated urls in the order given (the
// first is the one used while it is up), reconnecting forever.
func haConnect(t testing.TB, urls string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DontRandomize(), nats.ReconnectBufSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// haLog is the dispatcher flag set of these tests: debug logs, so that every
// handshake timeout (docs/protocol.md, Dispatch handshake, the one excused cause of a duplicate besides
// a killed worker) is on record.
var haLog = []string{"--log-level", "debug"}

// haRecorder follows the e2e wire for the whole test: every completion record
// (dispatch.done.*, duplicates included) and every acceptance by a worker (the
// "dispatched" outcomes on ha.outcome.<run>), with the time it was seen.
//
// Completion records are watched twice: on the recorder's own connection
// (dispatch.done.*) and on each mock worker's connection (dispatch.done.<id>,
// see watch and haStartMock), and deduplicated by their identity. The
// recorder's connection alone misses records published while it is
// reconnecting after a NATS restart (the workers may be back first); a
// worker's connection re-subscribes before it flushes what it buffered while
// disconnected, so it misses none of its own, except when the worker is killed
// (its connection closed) right after publishing: the recorder's connection
// covers that.
type haRecorder struct {
	mu         sync.Mutex
	seen       map[haRecordKey]bool   // completion records counted
	done       map[string][]string    // request id -> worker ids, one per completion record
	doneAt     map[string]time.Time   // request id -> first completion record
	doneTimes  map[string][]time.Time // request id -> every completion record's arrival
	offers     map[string][]haOffer   // request id -> acceptances seen
	offerTimes map[string][]time.Time // worker id -> every acceptance seen, in order
	records    atomic.Int64
	copies     atomic.Int64 // records seen again (on the other connection, or republished)
}

// haRecordKey identifies one completion record: one worker's completion of
// one delivery (a redelivery to the same worker is received at another time).
type haRecordKey struct {
	id, worker string
	seq        uint64
	received   int64
}

type haOffer struct {
	worker string
	at     time.Time
}

func haRecord(t testing.TB, nc *nats.Conn) *haRecorder {
	t.Helper()
	r := &haRecorder{seen: map[haRecordKey]bool{}, done: map[string][]string{}, doneAt: map[string]time.Time{}, doneTimes: map[string][]time.Time{},
		offers: map[string][]haOffer{}, offerTimes: map[string][]time.Time{}}
	subscribe(t, nc, "dispatch.done.*", r.onDone)
	// Acceptances, from the outcomes (docs/protocol.md, Outcomes) the dispatcher publishes on
	// each request's Dispatch-Reply-To. (Not a tap on dispatch.work.*: a
	// subscriber there would turn every "no responders" into a timeout.)
	onOutcome(t, nc, "ha.outcome.>", func(o wire.Outcome) {
		if o.Status != wire.StatusDispatched {
			return
		}
		now := time.Now()
		r.mu.Lock()
		r.offers[o.RequestID] = append(r.offers[o.RequestID], haOffer{o.WorkerID, now})
		r.offerTimes[o.WorkerID] = append(r.offerTimes[o.WorkerID], now)
		r.mu.Unlock()
	})
	return r
}

// onDone counts one completion record, unless it was seen already on another
// connection.
func (r *haRecorder) onDone(m *nats.Msg) {
	var c wire.Completion
	if json.Unmarshal(m.Data, &c) != nil {
		return
	}
	now := time.Now()
	k := haRecordKey{c.RequestID, c.WorkerID, c.Seq, c.ReceivedAt.UnixNano()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[k] {
		r.copies.Add(1)
		return
	}
	r.seen[k] = true
	r.done[c.RequestID] = append(r.done[c.RequestID], c.WorkerID)
	r.doneTimes[c.RequestID] = append(r.doneTimes[c.RequestID], now)
	if _, ok := r.doneAt[c.RequestID]; !ok {
		r.doneAt[c.RequestID] = now
	}
	r.records.Add(1)
}

// watch also records the completion records of worker id on nc, the
// connection the worker publishes them from.
func (r *haRecorder) watch(t testing.TB, nc *nats.Conn, id string) {
	t.Helper()
	subscribe(t, nc, "dispatch.done."+id, r.onDone)
}

// offersOf returns the acceptances of request id seen, as "worker@time".
func (r *haRecorder) offersOf(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, o := range r.offers[id] {
		out = append(out, o.worker+"@"+o.at.Format("15:04:05.000"))
	}
	return out
}

// completed returns the number of distinct requests with a completion record.
func (r *haRecorder) completed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

// firstOfferAfter returns the first acceptance by worker w seen after t.
func (r *haRecorder) firstOfferAfter(w string, t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.offerTimes[w] {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// offeredTo returns the request ids accepted by worker w before t.
func (r *haRecorder) offeredTo(w string, before time.Time) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, os := range r.offers {
		for _, o := range os {
			if o.worker == w && o.at.Before(before) {
				out[id] = true
			}
		}
	}
	return out
}

// haKilled is a worker killed at a moment: requests it accepted before then
// may legitimately complete twice (it may have done the work and lost the
// acknowledgement with its connection).
//
// A NATS server restart is no excuse: the mock workers publish the
// completion record and then confirm their acknowledgement
// (mockworker.Config.ConfirmAcks, set by haStartMock), sending +ACK again until JetStream
// answers. (Measured before, TestSoak seed 1795973244900524954: a plain +ACK
// published around the restart did not take effect, and JetStream
// redelivered the finished request when its ack wait ran out.)
type haKilled struct {
	worker string
	at     time.Time
}

// haPublisher publishes requests <run>-0 ... <run>-(n-1) with JetStream at a
// steady rate (0: as fast as its publishers go), retrying each failed
// publication with the same Nats-Msg-Id until it is stored, through server
// restarts and node loss: JetStream's duplicate window drops a retry whose
// first attempt was stored after all. So every id it counts as published is
// in the stream exactly once.
type haPublisher struct {
	run       string
	n         int
	rate      float64
	isl       int
	pin       func(i int) string // Dispatch-Worker of request i, "" for none
	published atomic.Int64
	retries   atomic.Int64
	stop      chan struct{}
	done      chan struct{}
	stopOnce  sync.Once
}

func (p *haPublisher) id(i int) string { return fmt.Sprintf("%s-%d", p.run, i) }

// start starts publishing on nc with conc concurrent publishers.
func (p *haPublisher) start(t testing.TB, nc *nats.Conn, conc int) {
	t.Helper()
	js := jsOf(t, nc)
	if p.isl == 0 {
		p.isl = 100
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	next := make(chan int, 1024)
	go func() { // pacing
		defer close(next)
		const step = 10 * time.Millisecond
		tk := time.NewTicker(step)
		defer tk.Stop()
		begin := time.Now()
		for i := 0; i < p.n; {
			if p.rate > 0 {
				due := int(p.rate * time.Since(begin).Seconds())
				for i < due && i < p.n {
					select {
					case next <- i:
						i++
					case <-p.stop:
						return
					}
				}
				select {
				case <-tk.C:
				case <-p.stop:
					return
				}
				continue
			}
			select {
			case next <- i:
				i++
			case <-p.stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := nats.NewMsg("dispatch.req.default")
				m.Header.Set(jetstream.MsgIDHeader, p.id(i))
				m.Header.Set("Dispatch-ISL-Tokens", strconv.Itoa(p.isl))
				m.Header.Set("Dispatch-Output-Tokens", "2")
				m.Header.Set("Dispatch-Reply-To", "ha.outcome."+p.run)
				if p.pin != nil {
					if w := p.pin(i); w != "" {
						m.Header.Set("Dispatch-Worker", w)
					}
				}
				m.Data = fmt.Appendf(nil, `{"run":%q,"n":%d}`, p.run, i)
				for attempt := 0; ; attempt++ {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_, err := js.PublishMsg(ctx, m)
					cancel()
					if err == nil {
						p.published.Add(1)
						break
					}
					p.retries.Add(1)
					select {
					case <-p.stop:
						if attempt > 200 { // give up only when asked to stop and hopeless
							return
						}
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		}()
	}
	go func() { wg.Wait(); close(p.done) }()
	t.Cleanup(func() { p.halt(); <-p.done })
}

// halt stops pacing: requests not yet handed to a publisher are not published.
func (p *haPublisher) halt() { p.stopOnce.Do(func() { close(p.stop) }) }

// wait waits until every request handed to a publisher is stored.
func (p *haPublisher) wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("publisher %s: not done after %v (%d published)", p.run, timeout, p.published.Load())
	}
}

// haVerdict is the nothing-lost check of issue 5.
type haVerdict struct {
	missing, dups, excused []string
	dlq                    map[string]string // request id -> Dispatch-Error
	records                int64
}

// haCheck waits until every published request has ended (completed or
// dead-lettered) and the request stream is empty, then checks that each id of
// the publishers completed or is in the DLQ, and that none completed twice
// unless excused: accepted by a worker before it was killed, or its
// handshake was logged as timed out by one of procs (docs/protocol.md, Dispatch handshake). It reports
// failures with t.Errorf and returns the figures.
func haCheck(t testing.TB, js jetstream.JetStream, rec *haRecorder, pubs []*haPublisher, killed []haKilled,
	timeout time.Duration, procs ...*proc) haVerdict {
	t.Helper()
	total := 0
	for _, p := range pubs {
		total += int(p.published.Load())
	}
	var dlq map[string]string
	ended := func() int {
		n := 0
		rec.mu.Lock()
		for _, p := range pubs {
			for i := range int(p.published.Load()) {
				id := p.id(i)
				if len(rec.done[id]) > 0 || dlq[id] != "" {
					n++
				}
			}
		}
		rec.mu.Unlock()
		return n
	}
	readDLQ := func() {
		dlq = map[string]string{}
		for _, m := range streamAll(t, js, "DISPATCH_DLQ") {
			dlq[m.Header.Get("Dispatch-Request-Id")] = m.Header.Get("Dispatch-Error")
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		readDLQ()
		n := ended()
		left := streamMsgs(t, js, "DISPATCH_REQ")
		if n == total && left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after %v: %d of %d requests ended, %d messages left in DISPATCH_REQ", timeout, n, total, left)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// A late duplicate would come within a dispatch round trip; give it time.
	time.Sleep(300 * time.Millisecond)

	excusedIDs := ecsTimedOut(procs...)
	nTimedOut := len(excusedIDs)
	for _, k := range killed {
		for id := range rec.offeredTo(k.worker, k.at) {
			excusedIDs[id] = true
		}
	}
	v := haVerdict{dlq: dlq, records: rec.records.Load()}
	rec.mu.Lock()
	for _, p := range pubs {
		for i := range int(p.published.Load()) {
			id := p.id(i)
			c := len(rec.done[id])
			switch {
			case c == 0 && dlq[id] == "":
				v.missing = append(v.missing, id)
			case c > 1 && excusedIDs[id]:
				v.excused = append(v.excused, fmt.Sprintf("%s %v", id, rec.done[id]))
			case c > 1 || (c > 0 && dlq[id] != ""):
				var at []string
				for _, d := range rec.doneTimes[id] {
					at = append(at, d.Format("15:04:05.000"))
				}
				v.dups = append(v.dups, fmt.Sprintf("%s %v at %v dlq=%q", id, rec.done[id], at, dlq[id]))
			}
		}
	}
	rec.mu.Unlock()
	sort.Strings(v.dups)
	t.Logf("verdict: %d requests published, %d completion records, DLQ %d %v, missing %d, duplicates %d unexcused + %d excused "+
		"(%d handshake timeouts logged, %d workers killed) %v; %d records seen again (on the other connection, or republished) and ignored",
		total, v.records, len(dlq), haCount(dlq), len(v.missing), len(v.dups), len(v.excused), nTimedOut, len(killed),
		v.excused[:min(5, len(v.excused))], rec.copies.Load())
	if len(v.missing) > 0 {
		var eg []string
		for _, id := range v.missing[:min(10, len(v.missing))] {
			eg = append(eg, fmt.Sprintf("%s (accepted by %v)", id, rec.offersOf(id)))
		}
		t.Errorf("%d requests neither completed nor dead-lettered, e.g. %v", len(v.missing), eg)
	}
	if len(v.dups) > 0 {
		t.Errorf("%d requests completed more than once (or completed and dead-lettered) without a killed worker or a logged "+
			"handshake timeout to explain it, e.g. %v", len(v.dups), v.dups[:min(10, len(v.dups))])
	}
	return v
}

func haCount(m map[string]string) map[string]int {
	out := map[string]int{}
	for _, v := range m {
		out[v]++
	}
	return out
}

// haRole is a dispatcher's role as its admin API shows it.
func haRole(p *proc) (ready bool, standby bool, gauge float64) {
	code, body := p.get("/readyz")
	return code == http.StatusOK, code == http.StatusServiceUnavailable && strings.Contains(body, "standby"), p.metric("fairdispatch_leader")
}

// haWaitStandby waits until p answers /readyz 503 "standby..." and its
// fairdispatch_leader gauge is 0.
func haWaitStandby(t testing.TB, p *proc) {
	t.Helper()
	waitFor(t, 20*time.Second, "dispatcher to stand by", func() bool {
		select {
		case <-p.done:
			t.Fatalf("dispatcher exited: %v\n%s", p.err, tail(p.out.String(), 40))
		default:
		}
		_, standby, gauge := haRole(p)
		return standby && gauge == 0
	})
}

// haWaitLead polls p every 5 ms until it leads (/readyz 200 or the gauge at
// 1) and returns when it saw that.
func haWaitLead(t testing.TB, p *proc, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, timeout, "the dispatcher to lead", func() bool {
		code, _ := p.get("/readyz")
		if code == http.StatusOK || p.metric("fairdispatch_leader") == 1 {
			at = time.Now()
		}
		return !at.IsZero()
	})
	return at
}

// haFailoverBound is leader/leader.go's documented bound for a standby to
// lead after the leader dies: TTL + TTL/4, plus the server's expiry scan and
// the standby's own round trips, for which we allow a second.
func haFailoverBound(ttl time.Duration) time.Duration { return ttl + ttl/4 + time.Second }

// haMock starts a mock worker on its own connection (so that it can be
// killed: closing the connection ends its reports, acks and subscription at
// once). The mocks are fast: the tests measure recovery, not engines. They
// confirm their acknowledgements (mockworker.Config.ConfirmAcks).
type haMock struct {
	id  string
	nc  *nats.Conn
	w   *mockworker.Worker
	cfg mockworker.Config
}

// When rec is not nil it also watches the worker's completion records on the
// worker's connection (see haRecorder).
func haStartMock(t testing.TB, rec *haRecorder, urls string, cfg mockworker.Config) *haMock {
	t.Helper()
	if cfg.PrefillTokensPerSec == 0 {
		cfg.PrefillTokensPerSec = 50000
	}
	if cfg.DecodePerToken == 0 {
		cfg.DecodePerToken = time.Millisecond
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 4 * time.Second
	}
	cfg.ConfirmAcks = true
	nc := haConnect(t, urls)
	if rec != nil {
		rec.watch(t, nc, cfg.ID)
	}
	return &haMock{id: cfg.ID, nc: nc, w: startMock(t, nc, cfg), cfg: cfg}
}

// kill closes the worker's connection: no more reports, acks, progress or completions.
func (m *haMock) kill() time.Time {
	m.nc.Close()
	return time.Now()
}

// restart stops the worker (it hands back what it holds) and starts a new
// instance under the same id on the same connection; it returns when the new
// instance has started.
func (m *haMock) restart(t testing.TB) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = m.w.Stop(ctx)
	cancel()
	m.w = startMock(t, m.nc, m.cfg)
	return time.Now()
}

// haLogLines returns p's log lines containing any of the fragments, shortened
// to their time, level and message fields where they parse as JSON.
func haLogLines(p *proc, fragments ...string) []string {
	var out []string
	for _, line := range strings.Split(p.out.String(), "\n") {
		hit := false
		for _, f := range fragments {
			hit = hit || strings.Contains(line, f)
		}
		if !hit {
			continue
		}
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil {
			s := fmt.Sprintf("%v %v %v", l["time"], l["level"], l["message"])
			for _, k := range []string{"reason", "error", "leader", "requests", "handed_back"} {
				if v, ok := l[k]; ok {
					s += fmt.Sprintf(" %s=%v", k, v)
				}
			}
			line = s
		}
		out = append(out, line)
	}
	return out
}
