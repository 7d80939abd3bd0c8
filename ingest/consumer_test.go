package ingest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// env is an embedded nats-server with the request stream.
type env struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateStream(ctx(t), jetstream.StreamConfig{
		Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{js: js, stream: st}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func testConfig() Config {
	return Config{Stream: "DISPATCH_REQ", Durable: "dispatcher", AckWait: 30 * time.Second,
		MaxHeld: 100, InFlight: 400, Batch: 16, PullWait: 200 * time.Millisecond}
}

// publish publishes one request and returns its stream sequence.
func (e *env) publish(t *testing.T, class string, h nats.Header) uint64 {
	t.Helper()
	ack, err := e.js.PublishMsg(ctx(t), &nats.Msg{Subject: "dispatch.req." + class, Header: h, Data: []byte("body")})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// publishN publishes n requests of class c without headers.
func (e *env) publishN(t *testing.T, n int) {
	t.Helper()
	for range n {
		e.publish(t, "c", nil)
	}
}

// backlog publishes n requests (publishN) and returns the test config
// holding at most maxHeld of them, pulled batch at a time.
func (e *env) backlog(t *testing.T, n, maxHeld, batch int) Config {
	t.Helper()
	e.publishN(t, n)
	cfg := testConfig()
	cfg.MaxHeld, cfg.Batch = maxHeld, batch
	return cfg
}

func (e *env) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.stream.Consumer(ctx(t), "dispatcher")
	if err != nil {
		t.Fatal(err)
	}
	i, err := c.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	natstest.Eventually(t, 10*time.Second, cond, "%s", what)
}

// running starts Run and returns the delivery channel, a collector of what was
// delivered, and a function that stops Run and returns its error.
type running struct {
	c    *Consumer
	out  chan []Delivery
	done chan error
}

func start(t *testing.T, e *env, cfg Config) *running {
	t.Helper()
	c, err := NewConsumer(ctx(t), e.js, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := &running{c: c, out: make(chan []Delivery), done: make(chan error, 1)}
	go func() { r.done <- c.Run(context.Background(), r.out) }()
	t.Cleanup(func() {
		c.Stop()
		if err := <-r.done; err != nil {
			t.Errorf("Run returned %v, want nil after Stop", err)
		}
	})
	return r
}

// take receives deliveries until it has n, or fails after 10 s.
func (r *running) take(t *testing.T, n int) []Delivery {
	t.Helper()
	var got []Delivery
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case b := <-r.out:
			got = append(got, b...)
		case <-timeout:
			t.Fatalf("got %d deliveries, want %d", len(got), n)
		}
	}
	if len(got) > n {
		t.Fatalf("got %d deliveries, want %d", len(got), n)
	}
	return got
}

func TestRunDelivers(t *testing.T) {
	e := newEnv(t)
	const n = 40
	seqs := map[string]uint64{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("r%d", i)
		seqs[id] = e.publish(t, fmt.Sprintf("class%d", i%3), nats.Header{
			"Nats-Msg-Id": {id}, wire.HeaderISLTokens: {fmt.Sprint(100 + i)}, "dispatch-reply-to": {"out." + id},
		})
	}
	r := start(t, e, testConfig())
	got := r.take(t, n)
	seen := map[uint64]bool{}
	for i, d := range got {
		id := d.Headers.MsgID
		if d.Err != nil {
			t.Fatalf("%s: got error %v", id, d.Err)
		}
		if seen[d.StreamSeq] {
			t.Fatalf("got stream seq %d twice", d.StreamSeq)
		}
		seen[d.StreamSeq] = true
		if d.StreamSeq != seqs[id] {
			t.Fatalf("%s: got stream seq %d, want %d", id, d.StreamSeq, seqs[id])
		}
		if d.StreamSeq != uint64(i+1) {
			t.Fatalf("delivery %d: got stream seq %d, want stream order", i, d.StreamSeq)
		}
		k := int(d.StreamSeq - 1)
		if want := fmt.Sprintf("class%d", k%3); d.Msg.Token() != want {
			t.Fatalf("%s: got token %q, want %q", id, d.Msg.Token(), want)
		}
		if d.Headers.ISL != uint64(100+k) || d.Headers.ReplyTo != "out."+id {
			t.Fatalf("%s: got headers %+v", id, d.Headers)
		}
		if d.NumDelivered != 1 {
			t.Fatalf("%s: got NumDelivered %d, want 1", id, d.NumDelivered)
		}
		raw, err := e.stream.GetMsg(ctx(t), d.StreamSeq)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Published.Equal(raw.Time) {
			t.Fatalf("%s: got published %v, want the stream's %v", id, d.Published, raw.Time)
		}
		if string(d.Msg.Data()) != "body" {
			t.Fatalf("%s: got body %q", id, d.Msg.Data())
		}
	}
	if h := r.c.Held(); h != n {
		t.Fatalf("got Held %d, want %d", h, n)
	}
	for _, d := range got {
		if err := d.Msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	r.c.Release(n)
	if h := r.c.Held(); h != 0 {
		t.Fatalf("got Held %d after Release, want 0", h)
	}
}

func TestRunStopsAtMaxHeld(t *testing.T) {
	e := newEnv(t)
	cfg := e.backlog(t, 50, 10, 4)
	r := start(t, e, cfg)
	got := r.take(t, 10)

	// At MaxHeld: no pull open, 10 delivered and unacknowledged, 40 waiting.
	waitFor(t, "no pull open at MaxHeld", func() bool { return e.info(t).NumWaiting == 0 })
	i := e.info(t)
	if i.NumAckPending != 10 || i.NumPending != 40 || r.c.Held() != 10 {
		t.Fatalf("got ack pending %d, pending %d, held %d; want 10, 40, 10", i.NumAckPending, i.NumPending, r.c.Held())
	}
	select {
	case b := <-r.out:
		t.Fatalf("got %d deliveries past MaxHeld", len(b))
	default:
	}

	// Release 5 (acknowledged by "workers"): exactly 5 more come.
	for _, d := range got[:5] {
		if err := d.Msg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	r.c.Release(5)
	got = append(got[5:], r.take(t, 5)...)
	// The acks are fire-and-forget: the server may count them a moment after
	// the 5 new deliveries, so wait for it to, then hold it to exactly 10.
	natstest.Eventually(t, 10*time.Second, func() bool {
		i = e.info(t)
		return i.NumWaiting == 0 && i.NumAckPending <= 10
	}, "no pull open at MaxHeld again and the 5 acks counted")
	if i.NumAckPending != 10 || i.NumPending != 35 || r.c.Held() != 10 {
		t.Fatalf("got ack pending %d, pending %d, held %d; want 10, 35, 10", i.NumAckPending, i.NumPending, r.c.Held())
	}

	// Release everything as it comes: all 50 arrive, then a pull stays open.
	total := 15
	for total < 50 {
		for _, d := range got {
			if err := d.Msg.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		r.c.Release(len(got))
		got = <-r.out
		total += len(got)
	}
	if total != 50 {
		t.Fatalf("got %d deliveries, want 50", total)
	}
	for _, d := range got {
		_ = d.Msg.Ack()
	}
	r.c.Release(len(got))
	waitFor(t, "a pull open below MaxHeld", func() bool { return e.info(t).NumWaiting >= 1 })

	// A message published to the idle consumer arrives at once.
	seq := e.publish(t, "late", nil)
	if d := r.take(t, 1)[0]; d.StreamSeq != seq || d.Msg.Token() != "late" {
		t.Fatalf("got seq %d token %q, want %d late", d.StreamSeq, d.Msg.Token(), seq)
	}
}

func TestRunMalformedHeader(t *testing.T) {
	e := newEnv(t)
	e.publish(t, "c", nats.Header{"Nats-Msg-Id": {"bad1"}, "Dispatch-ISL-Tokens": {"abc"}, wire.HeaderReplyTo: {"out.bad1"}})
	e.publish(t, "c", nats.Header{"Nats-Msg-Id": {"good"}})
	r := start(t, e, testConfig())
	got := r.take(t, 2)
	var he *HeaderError
	if !errors.As(got[0].Err, &he) || he.Header != wire.HeaderISLTokens {
		t.Fatalf("got error %v, want a *HeaderError naming %s", got[0].Err, wire.HeaderISLTokens)
	}
	if h := got[0].Headers; h.MsgID != "bad1" || h.ReplyTo != "out.bad1" {
		t.Fatalf("got headers %+v, want MsgID and ReplyTo kept", h)
	}
	if got[1].Err != nil || got[1].Headers.MsgID != "good" {
		t.Fatalf("got %+v, want the good request", got[1])
	}
}

// TestKeeperPreventsRedelivery: a message the Keeper holds is never redelivered
// while the control, held without a Keeper, is redelivered twice. The observation
// ends on that condition, not after a fixed time, and the ack wait (4 s) leaves
// the 100 ms ticker two seconds of slack on a loaded machine.
func TestKeeperPreventsRedelivery(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.AckWait = 4 * time.Second
	kept := e.publish(t, "c", nats.Header{"Nats-Msg-Id": {"kept"}})
	loose := e.publish(t, "c", nats.Header{"Nats-Msg-Id": {"loose"}})
	r := start(t, e, cfg)
	k := NewKeeper(cfg.AckWait, zerolog.Nop())
	held := time.Now()
	for _, d := range r.take(t, 2) {
		if d.StreamSeq == kept {
			k.Hold(d.StreamSeq, &d.Msg, held)
		}
	}

	sent, redelivered := 0, 0
	last := held
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for redelivered < 2 {
		select {
		case now := <-tick.C:
			sent += k.Tick(now)
			last = now
		case b := <-r.out:
			for _, d := range b {
				if d.StreamSeq == kept {
					t.Fatalf("kept message redelivered (NumDelivered %d)", d.NumDelivered)
				}
				if d.StreamSeq == loose {
					redelivered++
				}
			}
			r.c.Release(len(b))
		case <-timeout:
			t.Fatalf("got %d redeliveries of the loose message in 30 s, want 2 (ack wait %v)", redelivered, cfg.AckWait)
		}
	}
	// Two ack waits passed: the kept message needed progress acknowledgements,
	// at most one per half ack wait of the times Tick was given.
	if most := int(last.Sub(held) / (cfg.AckWait / 2)); sent < 1 || sent > most {
		t.Fatalf("got %d progress acknowledgements over %v, want 1 to %d", sent, last.Sub(held), most)
	}
	// NumRedelivered counts messages currently redelivered and pending: only
	// the loose one may be.
	if i := e.info(t); i.NumRedelivered > 1 || i.NumAckPending != 2 {
		t.Fatalf("got redelivered %d, ack pending %d; want <= 1 (the loose one), 2", i.NumRedelivered, i.NumAckPending)
	}
}

// TestKeeperNakAllRedeliversAtOnce: NakAll hands a held message back for
// redelivery at once. The ack wait is 30 s and the deadline 10 s, so only the
// NAK, never the ack wait, can redeliver it in time.
func TestKeeperNakAllRedeliversAtOnce(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	seq := e.publish(t, "c", nats.Header{"Nats-Msg-Id": {"kept"}})
	r := start(t, e, cfg)
	k := NewKeeper(cfg.AckWait, zerolog.Nop())
	d := r.take(t, 1)[0]
	k.Hold(d.StreamSeq, &d.Msg, time.Now())
	if n := k.NakAll(); n != 1 {
		t.Fatalf("got %d NAKs, want 1", n)
	}
	r.c.Release(1)
	d = r.take(t, 1)[0]
	if d.StreamSeq != seq || d.NumDelivered != 2 {
		t.Fatalf("got seq %d delivered %d times, want %d delivered twice", d.StreamSeq, d.NumDelivered, seq)
	}
}

func TestConsumerConfig(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.MaxHeld, cfg.InFlight, cfg.AckWait = 10, 40, 5*time.Second
	if _, err := NewConsumer(ctx(t), e.js, cfg, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	c := e.info(t).Config
	if c.MaxAckPending != 50 || c.AckWait != 5*time.Second || c.AckPolicy != jetstream.AckExplicitPolicy ||
		c.DeliverPolicy != jetstream.DeliverAllPolicy || c.Durable != "dispatcher" {
		t.Fatalf("got config %+v", c)
	}

	cfg.AckWait, cfg.InFlight = 7*time.Second, 90
	if _, err := NewConsumer(ctx(t), e.js, cfg, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if c := e.info(t).Config; c.AckWait != 7*time.Second || c.MaxAckPending != 100 {
		t.Fatalf("got ack wait %v, max ack pending %d; want 7s, 100", c.AckWait, c.MaxAckPending)
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Stream = "" },
		func(c *Config) { c.Durable = "" },
		func(c *Config) { c.AckWait = 0 },
		func(c *Config) { c.MaxHeld = 0 },
		func(c *Config) { c.InFlight = -1 },
		func(c *Config) { c.Batch = 0 },
		func(c *Config) { c.PullWait = -time.Second },
		func(c *Config) { c.MaxHeld, c.InFlight = 1<<31-1, 1 },
	}
	for i, f := range bad {
		c := testConfig()
		f(&c)
		if _, err := NewConsumer(context.Background(), nil, c, zerolog.Nop()); err == nil {
			t.Errorf("case %d: got no error for %+v", i, c)
		}
	}
}

// TestStopHandsBack stops Run while it holds deliveries the actor never took:
// they are NAKed and come back at once.
func TestStopHandsBack(t *testing.T) {
	e := newEnv(t)
	e.publishN(t, 5)
	c, err := NewConsumer(ctx(t), e.js, testConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background(), make(chan []Delivery)) }() // nobody receives
	waitFor(t, "5 received", func() bool { return c.Held() == 5 })
	c.Stop()
	c.Stop()
	if err := <-done; err != nil {
		t.Fatalf("got %v from Run, want nil", err)
	}
	if c.Held() != 0 {
		t.Fatalf("got Held %d after Stop, want 0", c.Held())
	}
	// No NAK ping-pong into our own pull: nothing delivered beyond the 5. (A
	// NAKed message still counts as ack pending until it is redelivered.)
	if i := e.info(t); i.Delivered.Consumer != 5 || i.NumWaiting != 0 {
		t.Fatalf("got %d deliveries, %d pulls open; want 5, 0", i.Delivered.Consumer, i.NumWaiting)
	}

	// A new Run (as after a restart) gets them again at once, not after the
	// 30 s ack wait (take and this loop give up after 10 s).
	c2, err := NewConsumer(ctx(t), e.js, testConfig(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []Delivery)
	runCtx, cancel := context.WithCancel(context.Background())
	go func() { done <- c2.Run(runCtx, out) }()
	n := 0
	timeout := time.After(10 * time.Second)
	for n < 5 {
		var b []Delivery
		select {
		case b = <-out:
		case <-timeout:
			t.Fatalf("got %d of the 5 handed back, want them redelivered at once", n)
		}
		for _, d := range b {
			if d.NumDelivered != 2 {
				t.Fatalf("got NumDelivered %d, want 2", d.NumDelivered)
			}
			n++
		}
	}
	if err := c2.Run(runCtx, out); !errors.Is(err, ErrRunning) {
		t.Fatalf("got %v from a second Run, want ErrRunning", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v from Run after cancel, want context.Canceled", err)
	}
}

// TestRunRecreatesDeletedConsumer deletes the durable consumer under a running
// Run: the pull fails, the consumer is created again, and requests flow.
func TestRunRecreatesDeletedConsumer(t *testing.T) {
	e := newEnv(t)
	r := start(t, e, testConfig())
	waitFor(t, "a pull open", func() bool { return e.info(t).NumWaiting >= 1 })
	if err := e.stream.DeleteConsumer(ctx(t), "dispatcher"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the consumer back", func() bool {
		_, err := e.stream.Consumer(ctx(t), "dispatcher")
		return err == nil
	})
	seq := e.publish(t, "c", nil)
	if d := r.take(t, 1)[0]; d.StreamSeq != seq {
		t.Fatalf("got seq %d, want %d", d.StreamSeq, seq)
	}
}

// TestRunRecreatesConsumerDeletedBetweenPulls deletes the durable consumer while
// Run has no pull open (it holds MaxHeld), so the next pull reaches no consumer
// and fails with no responders rather than "consumer deleted". The consumer must
// still be created again. This is the deterministic form of the race that made
// TestRunRecreatesDeletedConsumer flaky: under load the deletion could fall
// between two pulls, and Run then retried forever without re-creating it.
func TestRunRecreatesConsumerDeletedBetweenPulls(t *testing.T) {
	e := newEnv(t)
	cfg := e.backlog(t, 5, 3, 3)
	r := start(t, e, cfg)
	r.take(t, 3)
	waitFor(t, "3 held and no pull open", func() bool { return r.c.Held() == 3 && e.info(t).NumWaiting == 0 })
	if err := e.stream.DeleteConsumer(ctx(t), "dispatcher"); err != nil {
		t.Fatal(err)
	}
	r.c.Release(3)
	waitFor(t, "the consumer back", func() bool {
		_, err := e.stream.Consumer(ctx(t), "dispatcher")
		return err == nil
	})
	// The new consumer delivers from the start of the work queue again.
	for i, d := range r.take(t, 3) {
		if d.StreamSeq != uint64(i+1) {
			t.Fatalf("delivery %d: got seq %d, want %d", i, d.StreamSeq, i+1)
		}
	}
}

// TestRunChurn streams many requests through a small MaxHeld with an actor that
// acknowledges and releases as it goes: all arrive once, in order, and Held never
// exceeds MaxHeld.
func TestRunChurn(t *testing.T) {
	e := newEnv(t)
	const n = 3000
	for i := 0; i < n; i++ {
		if _, err := e.js.PublishAsync("dispatch.req.c", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("publishing timed out")
	}
	cfg := testConfig()
	cfg.MaxHeld, cfg.Batch = 50, 16
	r := start(t, e, cfg)
	next := uint64(1)
	timeout := time.After(30 * time.Second)
	for next <= n {
		select {
		case b := <-r.out:
			if h := r.c.Held(); h > cfg.MaxHeld {
				t.Fatalf("got Held %d, want <= %d", h, cfg.MaxHeld)
			}
			for _, d := range b {
				if d.StreamSeq != next {
					t.Fatalf("got seq %d, want %d", d.StreamSeq, next)
				}
				next++
				if err := d.Msg.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			r.c.Release(len(b))
		case <-timeout:
			t.Fatalf("got %d of %d", next-1, n)
		}
	}
}

// TestStopAtMaxHeld: with no pull open (the consumer is full), Stop still ends
// Run at once; it used to range over the nil channel of the missing pull forever.
func TestStopAtMaxHeld(t *testing.T) {
	e := newEnv(t)
	cfg := e.backlog(t, 5, 3, 3)
	c, err := NewConsumer(ctx(t), e.js, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []Delivery, 8)
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background(), out) }()
	waitFor(t, "3 held and no pull open", func() bool { return c.Held() == 3 && e.info(t).NumWaiting == 0 })
	c.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Stop with no pull open")
	}
}

// TestRunGate: while the gate is closed no pull is open and the stream keeps
// its messages, with room to spare below MaxHeld; opening it resumes pulling at once.
func TestRunGate(t *testing.T) {
	e := newEnv(t)
	gate := &Gate{}
	gate.Set(true)
	cfg := testConfig()
	cfg.Gate = gate
	e.publishN(t, 20)
	r := start(t, e, cfg)
	// Several pull waits (200 ms) pass with the gate closed: nothing is pulled.
	for deadline := time.Now().Add(3 * cfg.PullWait); time.Now().Before(deadline); {
		select {
		case b := <-r.out:
			t.Fatalf("got %d deliveries while the gate is closed", len(b))
		case <-time.After(20 * time.Millisecond):
		}
		if i := e.info(t); i.NumWaiting != 0 || i.NumPending != 20 || i.NumAckPending != 0 {
			t.Fatalf("gate closed: got waiting %d, pending %d, ack pending %d; want 0, 20, 0", i.NumWaiting, i.NumPending, i.NumAckPending)
		}
	}
	gate.Set(false)
	got := r.take(t, 20)
	for _, d := range got {
		_ = d.Msg.Ack()
	}
	r.c.Release(len(got))
	waitFor(t, "a pull open with the gate open", func() bool { return e.info(t).NumWaiting >= 1 })

	// Closed again: the open pull runs to its end and none follows.
	gate.Set(true)
	waitFor(t, "the open pull to end", func() bool { return e.info(t).NumWaiting == 0 })
	e.publish(t, "c", nil)
	for deadline := time.Now().Add(3 * cfg.PullWait); time.Now().Before(deadline); {
		select {
		case b := <-r.out:
			t.Fatalf("got %d deliveries while the gate is closed again", len(b))
		case <-time.After(20 * time.Millisecond):
		}
		if i := e.info(t); i.NumWaiting != 0 || i.NumPending != 1 {
			t.Fatalf("gate closed again: got waiting %d, pending %d; want 0, 1", i.NumWaiting, i.NumPending)
		}
	}
	gate.Set(false)
	r.take(t, 1)
}

func TestGateState(t *testing.T) {
	var g Gate
	closed, ch := g.State()
	if closed || g.Closed() {
		t.Fatal("zero gate is closed, want open")
	}
	g.Set(false) // no change: the channel stays open
	select {
	case <-ch:
		t.Fatal("changed channel closed without a change")
	default:
	}
	g.Set(true)
	select {
	case <-ch:
	default:
		t.Fatal("changed channel not closed by a change")
	}
	if closed, _ := g.State(); !closed {
		t.Fatal("gate open after Set(true)")
	}
}
