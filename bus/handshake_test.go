package bus

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// results collects delivered Results by token.
type results struct {
	mu  sync.Mutex
	got map[uint64][]Result
	n   int
}

func newResults() *results { return &results{got: map[uint64][]Result{}} }

func (r *results) deliver(res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[res.Token] = append(r.got[res.Token], res)
	r.n++
}

func (r *results) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *results) of(token uint64) []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.got[token]...)
}

// alternate requires one result for each token below n: even for the even
// tokens, odd for the odd ones.
func (r *results) alternate(t *testing.T, n int, even, odd Outcome) {
	t.Helper()
	for i := range n {
		want := even
		if i%2 == 1 {
			want = odd
		}
		if got := r.of(uint64(i)); len(got) != 1 || got[0].Outcome != want {
			t.Fatalf("token %d: got %+v, want one %v", i, got, want)
		}
	}
}

// worker subscribes to a work subject and answers with answer (nil: never).
func worker(t *testing.T, nc *nats.Conn, subject string, answer func(m *nats.Msg) *nats.Msg) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if answer == nil {
			return
		}
		if r := answer(m); r != nil {
			r.Subject = m.Reply
			_ = nc.PublishMsg(r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func newHandshaker(t *testing.T, nc *nats.Conn, timeout time.Duration) (*Handshaker, *results) {
	t.Helper()
	r := newResults()
	h, err := NewHandshaker(nc, "", timeout, r.deliver, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, r
}

func TestHandshakeClassifies(t *testing.T) {
	ts := startServer(t, nil)
	nc, wnc := connect(t, ts), connect(t, ts)

	var seenMu sync.Mutex
	var seen *nats.Msg
	worker(t, wnc, "dispatch.work.ok", func(m *nats.Msg) *nats.Msg {
		seenMu.Lock()
		seen = m
		seenMu.Unlock()
		return &nats.Msg{}
	})
	worker(t, wnc, "dispatch.work.busy", func(*nats.Msg) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"Dispatch-Status": []string{"busy"}}}
	})
	worker(t, wnc, "dispatch.work.shouty", func(*nats.Msg) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"dispatch-status": []string{"BUSY"}}}
	})
	// A Dispatch-Status with no value is still a refusal: only a reply
	// without the header accepts (docs/protocol.md, Accepting and refusing).
	worker(t, wnc, "dispatch.work.blank", func(*nats.Msg) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"Dispatch-Status": []string{""}}}
	})
	worker(t, wnc, "dispatch.work.mute", nil)

	// 5 s: the answering workers must answer within it even on a loaded
	// machine; only "mute" waits it out.
	h, r := newHandshaker(t, nc, 5*time.Second)
	hdr := nats.Header{"Dispatch-Request-Id": []string{"r1"}}
	cases := []struct {
		worker string
		want   Outcome
	}{
		{"ok", Accepted},
		{"busy", Refused},
		{"shouty", Refused},
		{"blank", Refused},
		{"nobody", NoResponders},
		{"mute", Timeout},
	}
	for i, c := range cases {
		if err := h.Send(c.worker, hdr, []byte("body"), uint64(i)); err != nil {
			t.Fatalf("Send(%s): %v", c.worker, err)
		}
	}
	waitFor(t, "all answers", func() bool { return r.count() == len(cases) })
	for i, c := range cases {
		got := r.of(uint64(i))
		if len(got) != 1 || got[0].Outcome != c.want || got[0].Worker != c.worker {
			t.Errorf("%s: got %+v, want one %v", c.worker, got, c.want)
		}
	}
	if n := h.InFlight(); n != 0 {
		t.Errorf("in flight: got %d, want 0", n)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	if string(seen.Data) != "body" || seen.Header.Get("Dispatch-Request-Id") != "r1" {
		t.Errorf("worker saw body %q headers %v", seen.Data, seen.Header)
	}
}

func TestHandshakeLateAnswerDropped(t *testing.T) {
	ts := startServer(t, nil)
	nc, wnc := connect(t, ts), connect(t, ts)
	replies := make(chan string, 1)
	worker(t, wnc, "dispatch.work.slow", func(m *nats.Msg) *nats.Msg {
		replies <- m.Reply
		return nil
	})
	h, r := newHandshaker(t, nc, 100*time.Millisecond)
	if err := h.Send("slow", nil, nil, 7); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "timeout", func() bool { return r.count() == 1 })
	if got := r.of(7); len(got) != 1 || got[0].Outcome != Timeout {
		t.Fatalf("got %+v, want one timeout", got)
	}
	if err := wnc.Publish(<-replies, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "late count", func() bool { return h.Late() == 1 })
	if n := r.count(); n != 1 {
		t.Errorf("deliveries: got %d, want 1", n)
	}
	// The token is free again once resolved.
	if err := h.Send("slow", nil, nil, 7); err != nil {
		t.Errorf("resend of a resolved token: %v", err)
	}
}

func TestHandshakeManyInFlight(t *testing.T) {
	const n = 1000
	ts := startServer(t, nil)
	nc, wnc := connect(t, ts), connect(t, ts)

	// The worker holds every request until all n have arrived, so all are in
	// flight at once, then answers: even tokens accept, odd ones refuse.
	var mu sync.Mutex
	var held []*nats.Msg
	all := make(chan struct{})
	worker(t, wnc, "dispatch.work.w1", func(m *nats.Msg) *nats.Msg {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, m)
		if len(held) == n {
			close(all)
		}
		return nil
	})
	h, r := newHandshaker(t, nc, time.Minute)
	for i := range n {
		hdr := nats.Header{"Token": []string{string(rune('a' + i%2))}}
		if err := h.Send("w1", hdr, nil, uint64(i)); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	if err := h.Send("w1", nil, nil, 3); !errors.Is(err, ErrDuplicateToken) {
		t.Errorf("duplicate token: got %v, want ErrDuplicateToken", err)
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatal("worker did not receive every request")
	}
	if got := h.InFlight(); got != n {
		t.Errorf("in flight: got %d, want %d", got, n)
	}
	mu.Lock()
	for _, m := range held {
		reply := &nats.Msg{Subject: m.Reply}
		if m.Header.Get("Token") == "b" {
			reply.Header = nats.Header{"Dispatch-Status": []string{"busy"}}
		}
		if err := wnc.PublishMsg(reply); err != nil {
			t.Fatal(err)
		}
	}
	mu.Unlock()
	waitFor(t, "all answers", func() bool { return r.count() == n })
	r.alternate(t, n, Accepted, Refused)
	if got := h.InFlight(); got != 0 {
		t.Errorf("in flight: got %d, want 0", got)
	}
	if got := h.Late(); got != 0 {
		t.Errorf("late: got %d, want 0", got)
	}
}

func TestHandshakeMixedTimeouts(t *testing.T) {
	const n = 200
	ts := startServer(t, nil)
	nc, wnc := connect(t, ts), connect(t, ts)
	// Odd tokens are answered at once, even ones never.
	worker(t, wnc, "dispatch.work.w1", func(m *nats.Msg) *nats.Msg {
		if m.Header.Get("Odd") == "1" {
			return &nats.Msg{}
		}
		return nil
	})
	// The timeout is long enough for every answer, even on a loaded machine.
	h, r := newHandshaker(t, nc, 2*time.Second)
	for i := range n {
		hdr := nats.Header{}
		if i%2 == 1 {
			hdr.Set("Odd", "1")
		}
		if err := h.Send("w1", hdr, nil, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all resolved", func() bool { return r.count() == n })
	r.alternate(t, n, Timeout, Accepted)
}

func TestHandshakeCloseResolvesInFlight(t *testing.T) {
	ts := startServer(t, nil)
	nc, wnc := connect(t, ts), connect(t, ts)
	got := make(chan struct{}, 1)
	worker(t, wnc, "dispatch.work.mute", func(*nats.Msg) *nats.Msg { got <- struct{}{}; return nil })
	h, r := newHandshaker(t, nc, time.Minute)
	if err := h.Send("mute", nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	<-got
	h.Close()
	if res := r.of(1); len(res) != 1 || res[0].Outcome != Timeout {
		t.Errorf("after Close: got %+v, want one timeout", res)
	}
	if err := h.Send("mute", nil, nil, 2); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: got %v, want ErrClosed", err)
	}
	h.Close() // idempotent
}

func TestHandshakeRejectsBadInput(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	h, _ := newHandshaker(t, nc, time.Second)
	if err := h.Send("a.b", nil, nil, 1); !errors.Is(err, ErrInvalidSubject) {
		t.Errorf("worker with a dot: got %v, want ErrInvalidSubject", err)
	}
	if _, err := NewHandshaker(nc, "", 0, func(Result) {}, zerolog.Nop()); err == nil {
		t.Error("zero timeout accepted")
	}
	nc.Close()
	if err := h.Send("w1", nil, nil, 2); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Send on a closed connection: got %v, want ErrNotConnected", err)
	}
}
