package workerkit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// ackTap stands in for JetStream on one Dispatch-Ack subject: it records
// every body received (and whether it came as a request) and answers a
// request when answer(n) says so, n counting the requests from 1.
type ackTap struct {
	mu     sync.Mutex
	bodies []string
	asked  []bool
	n      int
}

func tapAcks(t *testing.T, nc *nats.Conn, subject string, answer func(n int) bool) *ackTap {
	t.Helper()
	a := &ackTap{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		a.mu.Lock()
		a.bodies = append(a.bodies, string(m.Data))
		a.asked = append(a.asked, m.Reply != "")
		reply := false
		if m.Reply != "" {
			a.n++
			reply = answer(a.n)
		}
		a.mu.Unlock()
		if reply {
			_ = m.Respond(nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// got returns the bodies received other than +WPI, and how many came as requests.
func (a *ackTap) got() (bodies []string, asked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, b := range a.bodies {
		if b == "+WPI" {
			continue
		}
		bodies = append(bodies, b)
		if a.asked[i] {
			asked++
		}
	}
	return bodies, asked
}

func always(int) bool { return true }

// request returns the i-th request a accepted.
func (a *app) request(i int) *workerkit.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[i]
}

// TestDoneConfirmsInBackground: Done sends +ACK as a request to a real
// JetStream consumer and returns without waiting; JetStream's answer is
// counted as a confirmation and the message is removed.
func TestDoneConfirmsInBackground(t *testing.T) {
	_, nc := natstest.StartServer(t)
	f := newJS(t, nc, 30*time.Second)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	i := accept(t, nc, a, "r0", 1, m.Reply())
	a.finish(t, i, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == 1 }, "the +ACK confirmed")
	if got := f.msgs(t); got != 0 {
		t.Errorf("messages after a confirmed ack: got %d, want 0", got)
	}
	if s := a.w.Stats(); s.AckRetries != 0 || s.AcksUnconfirmed != 0 || s.AcksPending != 0 || s.AcksPlain != 0 {
		t.Errorf("stats %+v: want one confirmation and nothing else", s)
	}
}

// TestDoneRetriesUntilAnswered: the first attempts find no responders (as
// while JetStream recovers its consumers), then one goes unanswered; the
// helper sends +ACK again each time, calling DoneAfter's function ahead of
// every attempt, until an attempt is answered. The only responder
// subscribes after DoneAfter returned: a DoneAfter that waited for the
// answer would never get one, and the +ACK would not be confirmed.
func TestDoneRetriesUntilAnswered(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	i := accept(t, nc, a, "r0", 1, "test.ack.r0")
	var mu sync.Mutex
	var before []int
	a.finish(t, i, func(r *workerkit.Request) error {
		return r.DoneAfter(func(attempt int) { mu.Lock(); before = append(before, attempt); mu.Unlock() })
	})
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AckRetries >= 2 }, "two attempts finding no responders")
	tap := tapAcks(t, nc, "test.ack.r0", func(n int) bool { return n > 1 }) // the first it hears goes unanswered
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == 1 }, "the +ACK confirmed")
	bodies, asked := tap.got()
	if len(bodies) != 2 || asked != 2 || bodies[0] != "+ACK" || bodies[1] != "+ACK" {
		t.Errorf("the responder got %q (%d as requests), want +ACK twice, as requests", bodies, asked)
	}
	s := a.w.Stats()
	mu.Lock()
	defer mu.Unlock()
	if len(before) != int(s.AckRetries)+1 || before[0] != 1 || before[len(before)-1] != len(before) {
		t.Errorf("before called with %v for %d retries, want 1, 2, ... for every attempt", before, s.AckRetries)
	}
	if s.AcksUnconfirmed != 0 || s.AcksPending != 0 {
		t.Errorf("stats %+v: want nothing unconfirmed or pending", s)
	}
}

// TestNakNotRetriedAfterTimeout: an unanswered -NAK may have taken effect,
// so it is not sent again (a second one could hand back the redelivery
// another worker runs); one that finds no responders is.
func TestNakNotRetriedAfterTimeout(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	tap := tapAcks(t, nc, "test.ack.silent", func(int) bool { return false })
	i := accept(t, nc, a, "r0", 1, "test.ack.silent")
	a.finish(t, i, (*workerkit.Request).Nak)
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksUnconfirmed == 1 }, "the -NAK given up")
	if bodies, asked := tap.got(); len(bodies) != 1 || asked != 1 || bodies[0] != "-NAK" {
		t.Errorf("the silent responder got %q, want one -NAK as a request", bodies)
	}

	j := accept(t, nc, a, "r1", 2, "test.ack.late")
	a.finish(t, j, (*workerkit.Request).Nak)
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AckRetries >= 1 }, "a -NAK finding no responders")
	tapAcks(t, nc, "test.ack.late", always)
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == 1 }, "the second -NAK confirmed")
}

// TestDoneGivesUpAfterAckWait: nobody ever answers; the helper stops once
// the request's ack wait (Dispatch-Ack-Wait-Ms, 300 ms) has passed and
// counts the acknowledgement unconfirmed.
func TestDoneGivesUpAfterAckWait(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	n := a.count()
	d := dispatchMsg("r0", 1, 0, "test.ack.nobody")
	d.Header.Set("Dispatch-Ack-Wait-Ms", "300")
	if _, err := nc.RequestMsg(d, wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return a.count() == n+1 }, "request accepted")
	start := time.Now()
	a.finish(t, n, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksUnconfirmed == 1 }, "the +ACK given up")
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("given up after %v, before the ack wait of 300 ms", took)
	}
	if s := a.w.Stats(); s.AcksPending != 0 || s.AcksConfirmed != 0 || s.AckRetries == 0 {
		t.Errorf("stats %+v: want retries, then nothing pending", s)
	}
}

// TestDoneAcrossServerRestart: requests are finished while the server is
// down; their acknowledgements wait for the connection and go through once
// the server and its JetStream are back, and nothing is redelivered.
func TestDoneAcrossServerRestart(t *testing.T) {
	const ackWait = 3 * time.Second
	f := newRestartFixture(t, ackWait)
	const n = 5
	f.publish(t, n)
	ms := f.fetch(t, n)
	a := startWorker(t, f.wnc, workerkit.Config{ID: "w1", AckWait: ackWait})
	if err := f.wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	for k, m := range ms {
		accept(t, f.nc, a, "r"+string(rune('0'+k)), uint64(k+1), m.Reply())
	}
	f.ns.Stop()
	for k := range n {
		a.finish(t, k, (*workerkit.Request).Done) // published into the reconnect buffer, then retried
	}
	natstest.Eventually(t, wait, func() bool { return !f.wnc.IsConnected() }, "the worker disconnected")
	f.ns.Restart()
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == n }, "every +ACK confirmed")
	f.requireAckedGone(t)
	t.Logf("stats %+v", a.w.Stats())
}

// TestNakWhileDisconnectedWaitsForTheConnection: a -NAK made while the
// connection is down is not given up as one whose answer was lost, nor put
// into the reconnect buffer (whose copy nats.go would send on reconnection,
// beside a retry): it waits for the connection, and its one attempt is
// confirmed once the server and its JetStream are back.
func TestNakWhileDisconnectedWaitsForTheConnection(t *testing.T) {
	f := newRestartFixture(t, 30*time.Second)
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	a := startWorker(t, f.wnc, workerkit.Config{ID: "w1"})
	if err := f.wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	accept(t, f.nc, a, "r0", 1, m.Reply())
	f.ns.Stop()
	natstest.Eventually(t, wait, func() bool { return !f.wnc.IsConnected() }, "the worker disconnected")
	a.finish(t, 0, (*workerkit.Request).Nak)
	if n := workerkit.AckRetriesPending(a.w); n != 1 {
		t.Fatalf("%d acknowledgements waiting for the connection, want the -NAK", n)
	}
	f.ns.Restart()
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AcksConfirmed == 1 }, "the -NAK confirmed after the restart")
	if s := a.w.Stats(); s.AcksUnconfirmed != 0 || s.AckRetries != 0 {
		t.Errorf("stats %+v: want the -NAK sent once, on the connection, and confirmed", s)
	}
}

// TestPlainAcks: with Config.PlainAcks the acknowledgement is a plain
// publish, as before confirmed acknowledgements: no reply subject.
func TestPlainAcks(t *testing.T) {
	_, nc := natstest.StartServer(t)
	tap := tapAcks(t, nc, "test.ack.plain", always)
	a := startWorker(t, nc, workerkit.Config{ID: "w1", PlainAcks: true})
	i := accept(t, nc, a, "r0", 1, "test.ack.plain")
	a.finish(t, i, (*workerkit.Request).Done)
	natstest.Eventually(t, wait, func() bool { b, _ := tap.got(); return len(b) == 1 }, "the +ACK")
	if bodies, asked := tap.got(); bodies[0] != "+ACK" || asked != 0 {
		t.Errorf("got %q, %d as requests; want one plain +ACK", bodies, asked)
	}
	if s := a.w.Stats(); s.AcksPlain != 1 || s.AcksConfirmed != 0 {
		t.Errorf("stats %+v: want one plain acknowledgement", s)
	}
}

// TestStopWaitsForConfirmations: Stop waits, within its context, for the
// acknowledgements JetStream has not answered yet.
func TestStopWaitsForConfirmations(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	i := accept(t, nc, a, "r0", 1, "test.ack.slow")
	a.finish(t, i, (*workerkit.Request).Done) // no responders yet: retried
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		stopped <- a.w.Stop(ctx)
	}()
	natstest.Eventually(t, wait, func() bool { return a.w.Stats().AckRetries >= 1 }, "a retry")
	stopWaits(t, stopped, func() { tapAcks(t, nc, "test.ack.slow", always) })
	if s := a.w.Stats(); s.AcksConfirmed != 1 || s.AcksUnconfirmed != 0 {
		t.Errorf("stats %+v: want the acknowledgement confirmed", s)
	}
}

// stopWaits checks that Stop, running in the background and reporting on
// stopped, has not returned while an acknowledgement is outstanding; then
// calls confirm, which lets it be confirmed, and checks that Stop returns
// without an error.
func stopWaits(t *testing.T, stopped <-chan error, confirm func()) {
	t.Helper()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with an acknowledgement outstanding", err)
	default:
	}
	confirm()
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("stop: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Stop did not return once the acknowledgement was confirmed")
	}
}

// TestResponseDoneConfirmsThroughTheAcker: Done of a request with a
// response sends the end marker and then leaves the +ACK to the acker, as
// without a response: retried while no responder answers (as while
// JetStream recovers), and waited for by Stop, rather than given up after
// a fixed time with nothing to show for it.
func TestResponseDoneConfirmsThroughTheAcker(t *testing.T) {
	_, nc := natstest.StartServer(t)
	prod := natstest.NewProducer(t, nc, "resp.r1", natstest.GoOK)
	w, _ := startStreamer(t, nc, func(r *workerkit.Request) {
		p := r.Response()
		if p.Start(context.Background()) != nil || p.Write([]byte("tok")) != nil {
			return
		}
		_ = r.Done()
	})
	dispatchResponse(t, nc, "r1", 1, "resp.r1")
	natstest.Eventually(t, wait, func() bool { return len(prod.Of(wire.MsgEnd)) == 1 }, "the end marker")
	natstest.Eventually(t, wait, func() bool { return w.Stats().AckRetries >= 1 }, "the +ACK retried by the acker")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	n := w.Stats().AckRetries
	natstest.Eventually(t, wait, func() bool { return w.Stats().AckRetries > n }, "a retry while stopping")
	var tap *ackTap
	stopWaits(t, stopped, func() { tap = tapAcks(t, nc, "ack.r1", always) })
	if s := w.Stats(); s.AcksConfirmed != 1 || s.AcksUnconfirmed != 0 {
		t.Errorf("stats %+v: want the +ACK confirmed", s)
	}
	if bodies, _ := tap.got(); len(bodies) == 0 || bodies[len(bodies)-1] != "+ACK" {
		t.Errorf("the ack subject got %q, want +ACK", bodies)
	}
}
