// Package natstest holds test fixtures shared by the module's tests: an
// embedded nats-server with JetStream (restartable on the same port and store),
// a test double of a server that closes TLS connections right after the
// handshake (ClosingTLSServer),
// a deadline-bounded condition poller, a fake dispatcher that speaks the dispatcher's side of the wire contract (docs/protocol.md, Dispatch handshake)
// with no scheduling at all, a buffer goroutines may write, and the lookup
// of a program a test needs (failing under CI without it, skipping
// elsewhere).
//
// It is for tests only. Every function takes a testing.TB and fails the test on
// setup errors.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// Server is an embedded nats-server with JetStream on a loopback port that can
// be stopped and started again on the same port and store directory. It is
// shut down at the end of the test.
type Server struct {
	t    testing.TB
	mod  func(*server.Options)
	dir  string
	port atomic.Int64 // -1 until the first start; read by URL from any goroutine
	mu   sync.Mutex
	srv  *server.Server
}

// Start starts a Server storing in t.TempDir(); mod, when not nil, adjusts
// the options before each start (a port of -1 there means a random one, kept
// across restarts).
func Start(t testing.TB, mod func(*server.Options)) *Server {
	t.Helper()
	s := &Server{t: t, mod: mod, dir: t.TempDir()}
	s.port.Store(-1)
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// options are the server's options: the defaults, then s.mod.
func (s *Server) options() *server.Options {
	o := &server.Options{Host: "127.0.0.1", Port: int(s.port.Load()), JetStream: true, StoreDir: s.dir, NoLog: true, NoSigs: true}
	if s.mod != nil {
		s.mod(o)
	}
	return o
}

func (s *Server) start() {
	s.t.Helper()
	srv, err := server.NewServer(s.options())
	if err != nil {
		s.t.Fatalf("natstest: new server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatalf("natstest: server not ready")
	}
	s.mu.Lock()
	s.srv = srv
	if a, ok := srv.Addr().(*net.TCPAddr); ok {
		s.port.Store(int64(a.Port))
	}
	s.mu.Unlock()
}

// Stop shuts the server down and waits for it; a stopped Server may be
// started again with Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Reload makes mod adjust the options from now on (in place of Start's) and
// reloads the running server's configuration with them, as a SIGHUP reloads
// a server's file: changed credentials close the connections they no longer
// admit.
func (s *Server) Reload(mod func(*server.Options)) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mod = mod
	if s.srv == nil {
		s.t.Fatalf("natstest: reload of a stopped server")
	}
	if err := s.srv.ReloadOptions(s.options()); err != nil {
		s.t.Fatalf("natstest: reload: %v", err)
	}
}

// Restart stops the server and starts it again on the same port and store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Connect opens a connection to s that reconnects every 20 ms, forever
// (across Stop and Restart), closed at the end of the test.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Running returns the running server, or nil while it is stopped.
func (s *Server) Running() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Port returns the server's port, the same across restarts.
func (s *Server) Port() int { return int(s.port.Load()) }

// URL returns the client URL, the same across restarts.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port()) }

// StartServer starts an embedded nats-server with JetStream on a random loopback
// port, storing in t.TempDir(), and returns it with a connection to it. Both are
// closed at the end of the test.
func StartServer(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: server not ready")
	}
	nc := Connect(t, s)
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s, nc
}

// Connect opens another connection to s, closed at the end of the test.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Eventually polls cond every few milliseconds until it returns true, failing
// the test with msg when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("natstest: timed out after %v: %s", timeout, fmt.Sprintf(msg, args...))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// RequestStream creates (or updates) the request stream DISPATCH_REQ on
// <prefix>.req.* with work-queue retention and memory storage.
func RequestStream(t testing.TB, js jetstream.JetStream, prefix string) jetstream.Stream {
	t.Helper()
	st, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{
		Name:      "DISPATCH_REQ",
		Subjects:  []string{prefix + ".req.*"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("natstest: create stream: %v", err)
	}
	return st
}

// PullConsumer creates the durable pull consumer "dispatcher" on st with the
// given ack wait.
func PullConsumer(t testing.TB, st jetstream.Stream, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	c, err := st.CreateOrUpdateConsumer(context.Background(), jetstream.ConsumerConfig{
		Durable:       "dispatcher",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: 10000,
	})
	if err != nil {
		t.Fatalf("natstest: create consumer: %v", err)
	}
	return c
}

// Route decides what the fake dispatcher does with one request: send it to
// worker (rank 0) or, when reject is not empty, reject it with that error code.
type Route func(class string, m jetstream.Msg) (worker, reject string)

// FakeDispatcher pulls requests from DISPATCH_REQ and hands each, in order, to
// the worker its Route names, with the headers of docs/protocol.md, Dispatch handshake. It does no queueing
// and no load tracking: a refused or unanswered request is naked for redelivery
// after a short delay.
type FakeDispatcher struct {
	nc     *nats.Conn
	prefix string
	route  Route
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	seq      map[string]uint64
	refused  atomic.Int64
	rejected atomic.Int64
}

// StartFakeDispatcher creates the stream and consumer and starts dispatching.
// It stops at the end of the test.
func StartFakeDispatcher(t testing.TB, nc *nats.Conn, prefix string, ackWait time.Duration, route Route) *FakeDispatcher {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	st := RequestStream(t, js, prefix)
	c := PullConsumer(t, st, ackWait)
	it, err := c.Messages()
	if err != nil {
		t.Fatalf("natstest: messages: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &FakeDispatcher{nc: nc, prefix: prefix, route: route, cancel: cancel,
		done: make(chan struct{}), seq: map[string]uint64{}}
	go d.loop(ctx, it)
	t.Cleanup(func() {
		cancel()
		it.Stop()
		<-d.done
	})
	return d
}

// Refused returns how many dispatches were refused or went unanswered.
func (d *FakeDispatcher) Refused() int { return int(d.refused.Load()) }

// Rejected returns how many requests were rejected.
func (d *FakeDispatcher) Rejected() int { return int(d.rejected.Load()) }

func (d *FakeDispatcher) loop(ctx context.Context, it jetstream.MessagesContext) {
	defer close(d.done)
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		d.handle(ctx, m)
	}
}

func (d *FakeDispatcher) handle(ctx context.Context, m jetstream.Msg) {
	class := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
	meta, _ := m.Metadata()
	id := m.Headers().Get(jetstream.MsgIDHeader)
	if id == "" && meta != nil {
		id = fmt.Sprintf("DISPATCH_REQ:%d", meta.Sequence.Stream)
	}
	var queuedMs int64
	if meta != nil {
		queuedMs = max(0, time.Since(meta.Timestamp).Milliseconds())
	}
	replyTo := m.Headers().Get(wire.HeaderReplyTo)
	wid, reject := d.route(class, m)
	if reject != "" {
		d.rejected.Add(1)
		if replyTo != "" {
			b, _ := json.Marshal(map[string]any{"request_id": id, "status": "rejected",
				"policy_class": class, "error": reject, "message": "fake dispatcher rejected it"})
			_ = d.nc.Publish(replyTo, b)
		}
		_ = m.Term()
		return
	}
	d.mu.Lock()
	d.seq[wid]++
	seq := d.seq[wid]
	d.mu.Unlock()
	isl, _ := strconv.ParseUint(m.Headers().Get(wire.HeaderISLTokens), 10, 64)
	cached, _ := strconv.ParseUint(m.Headers().Get(wire.HeaderCachedTokens), 10, 64)
	cost := max(1, isl-min(cached, isl))
	out := nats.NewMsg(d.prefix + ".work." + wid)
	for k, v := range m.Headers() {
		out.Header[k] = v
	}
	out.Header.Set(wire.HeaderRequestID, id)
	out.Header.Set(wire.HeaderClass, class)
	out.Header.Set(wire.HeaderDPRank, "0")
	out.Header.Set(wire.HeaderSeq, strconv.FormatUint(seq, 10))
	out.Header.Set(wire.HeaderCost, strconv.FormatUint(cost, 10))
	out.Header.Set(wire.HeaderQueuedMs, strconv.FormatInt(queuedMs, 10))
	out.Header.Set(wire.HeaderAck, m.Reply())
	out.Data = m.Data()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := d.nc.RequestMsgWithContext(rctx, out)
	if err != nil || resp.Header.Get(wire.HeaderStatus) == "busy" {
		d.refused.Add(1)
		_ = m.NakWithDelay(20 * time.Millisecond)
		return
	}
	if replyTo != "" {
		b, _ := json.Marshal(map[string]any{"request_id": id, "status": "dispatched",
			"policy_class": class, "worker_id": wid, "dp_rank": 0, "queued_ms": queuedMs})
		_ = d.nc.Publish(replyTo, b)
	}
}

// DispatchHeader returns the headers and body of a dispatch tapped on
// <prefix>.work.<id> as the header form carries them, whichever form it came
// in (docs/protocol.md, Compact dispatch form): a compact frame's fields
// become the eight Dispatch-* headers, next to the producer's headers it
// forwards. A message without headers that is no frame, or a frame whose
// producer headers hold one of the eight names, is an error.
func DispatchHeader(m *nats.Msg) (nats.Header, []byte, error) {
	if len(m.Header) > 0 {
		return m.Header, m.Data, nil
	}
	var d wire.Dispatch
	h, body, err := wire.DecodeDispatch(m.Data, &d)
	if err != nil {
		return nil, nil, err
	}
	hdr := nats.Header(h)
	if hdr == nil {
		hdr = nats.Header{}
	}
	for k, v := range map[string]string{wire.HeaderRequestID: d.RequestID, wire.HeaderClass: d.Class,
		wire.HeaderDPRank: strconv.FormatUint(uint64(d.DPRank), 10), wire.HeaderSeq: strconv.FormatUint(d.Seq, 10),
		wire.HeaderCost: strconv.FormatUint(d.Cost, 10), wire.HeaderQueuedMs: strconv.FormatUint(d.QueuedMs, 10),
		wire.HeaderAck: d.Ack, wire.HeaderAckWaitMs: strconv.FormatUint(d.AckWaitMs, 10)} {
		if _, dup := hdr[k]; dup {
			return nil, nil, fmt.Errorf("the frame's headers hold %s, which the dispatcher sets", k)
		}
		hdr[k] = []string{v}
	}
	return hdr, body, nil
}
