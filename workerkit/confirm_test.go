package workerkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
	"fairdispatch/workerkit"
)

// accept dispatches one request with Dispatch-Ack ack to the worker of a and
// waits until it holds it; it returns the request's index in a.held.
func accept(t *testing.T, nc *nats.Conn, a *app, id string, seq uint64, ack string) int {
	t.Helper()
	n := a.count()
	if _, err := nc.RequestMsg(dispatchMsg(id, seq, 0, ack), wait); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, func() bool { return a.count() == n+1 }, "request %s accepted", id)
	return n
}

func TestDoneConfirmedConfirms(t *testing.T) {
	_, nc := natstest.StartServer(t)
	f := newJS(t, nc, 30*time.Second)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	i := accept(t, nc, a, "r0", 1, m.Reply())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a.finish(t, i, func(r *workerkit.Request) error { return r.DoneConfirmed(ctx) })
	if got := f.msgs(t); got != 0 {
		t.Errorf("messages after confirmed ack: got %d, want 0", got)
	}
	a.mu.Lock()
	r := a.held[i]
	a.mu.Unlock()
	if err := r.DoneConfirmedAfter(ctx, func(int) { t.Errorf("before called for a finished request") }); err != workerkit.ErrFinished {
		t.Errorf("second DoneConfirmed: got %v, want ErrFinished", err)
	}
	// What makes retrying safe: JetStream answers an ack of a message it has
	// already acknowledged and removed from the work queue.
	if _, err := nc.Request(m.Reply(), []byte("+ACK"), wait); err != nil {
		t.Errorf("ack of a removed message: got %v, want an answer", err)
	}
}

// TestDoneConfirmedRetriesNoResponders: nobody answers on the ack subject at
// first (as while JetStream recovers its consumers); the ack is sent again
// until a responder appears, and a responder that lets an attempt time out
// gets another.
func TestDoneConfirmedRetriesNoResponders(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	i := accept(t, nc, a, "r0", 1, "test.ack.r0")

	var attempts atomic.Int32
	go func() {
		time.Sleep(200 * time.Millisecond)
		sub, err := nc.Subscribe("test.ack.r0", func(m *nats.Msg) {
			if string(m.Data) != "+ACK" {
				t.Errorf("ack body %q", m.Data)
			}
			if attempts.Add(1) == 1 {
				return // the first answered attempt times out
			}
			_ = m.Respond(nil)
		})
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	var before []int
	a.finish(t, i, func(r *workerkit.Request) error {
		return r.DoneConfirmedAfter(ctx, func(attempt int) {
			if a.w.Held() != 0 {
				t.Errorf("attempt %d: the request is still held", attempt)
			}
			before = append(before, attempt)
		})
	})
	if len(before) < 2 || before[0] != 1 || before[len(before)-1] != len(before) {
		t.Errorf("before called with %v, want 1, 2, ... for every attempt (at least 2)", before)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("confirmed after %v, want after one attempt's timeout (1 s) past the responder's arrival", took)
	}
	if got := attempts.Load(); got != 2 {
		t.Errorf("attempts seen by the responder: got %d, want 2", got)
	}
	if a.w.Held() != 0 {
		t.Errorf("held after DoneConfirmed: %d", a.w.Held())
	}
}

func TestDoneConfirmedBoundedByContext(t *testing.T) {
	_, nc := natstest.StartServer(t)
	a := startWorker(t, nc, workerkit.Config{ID: "w1"})
	i := accept(t, nc, a, "r0", 1, "test.ack.nobody")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a.mu.Lock()
	r := a.held[i]
	a.mu.Unlock()
	start := time.Now()
	err := r.DoneConfirmed(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unanswered ack: got %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 15*time.Second { // bounded, not fast: generous for a loaded machine
		t.Errorf("gave up after %v, want about the context's 300 ms", took)
	}
}

// TestDoneConfirmedConnectionClosed: on a closed connection DoneConfirmed
// returns ErrConnectionClosed at once. Its context never ends and the ack
// wait is an hour, so a DoneConfirmed that waited for either would not
// return within the guard.
func TestDoneConfirmedConnectionClosed(t *testing.T) {
	s, nc := natstest.StartServer(t)
	wnc := natstest.Connect(t, s)
	a := startWorker(t, wnc, workerkit.Config{ID: "w1", AckWait: time.Hour})
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	i := accept(t, nc, a, "r0", 1, "test.ack.nobody")
	a.mu.Lock()
	r := a.held[i]
	a.mu.Unlock()
	wnc.Close()
	done := make(chan error, 1)
	go func() { done <- r.DoneConfirmed(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("ack on a closed connection: got %v, want ErrConnectionClosed", err)
		}
	case <-time.After(2 * wait): // a guard, not a bound: a correct DoneConfirmed does not wait at all
		t.Fatal("DoneConfirmed on a closed connection did not return: it waits for its context or the ack wait")
	}
}

// TestDoneConfirmedAcrossServerRestart: the request is finished while the
// server is down; the ack goes through once the server and its JetStream are
// back, and the message is not redelivered.
func TestDoneConfirmedAcrossServerRestart(t *testing.T) {
	const ackWait = 2 * time.Second
	f := newRestartFixture(t, ackWait)
	f.publish(t, 1)
	m := f.fetch(t, 1)[0]
	a := startWorker(t, f.wnc, workerkit.Config{ID: "w1", AckWait: ackWait})
	if err := f.wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	i := accept(t, f.nc, a, "r0", 1, m.Reply())

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f.ns.Stop()
	done := make(chan error, 1)
	go func() {
		a.finish(t, i, func(r *workerkit.Request) error { done <- r.DoneConfirmed(ctx); return nil })
	}()
	time.Sleep(300 * time.Millisecond) // the ack waits in the reconnect buffer, then is retried
	f.ns.Restart()
	if err := <-done; err != nil {
		t.Fatalf("DoneConfirmed across the restart: %v", err)
	}
	f.requireAckedGone(t)
}
