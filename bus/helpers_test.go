package bus

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// testServer is an embedded nats-server with JetStream that can be restarted
// on the same port and store directory.
type testServer struct {
	t    *testing.T
	mod  func(*server.Options)
	dir  string
	port int
	mu   sync.Mutex
	srv  *server.Server
}

func startServer(t *testing.T, mod func(*server.Options)) *testServer {
	t.Helper()
	ts := &testServer{t: t, mod: mod, dir: t.TempDir(), port: -1}
	ts.start()
	ts.port = ts.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(ts.shutdown)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: ts.port, JetStream: true, StoreDir: ts.dir, NoLog: true, NoSigs: true}
	if ts.mod != nil {
		ts.mod(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		ts.t.Fatalf("new server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		ts.t.Fatal("nats-server not ready")
	}
	ts.mu.Lock()
	ts.srv = s
	ts.mu.Unlock()
}

func (ts *testServer) shutdown() {
	ts.mu.Lock()
	s := ts.srv
	ts.srv = nil
	ts.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (ts *testServer) restart() {
	ts.t.Helper()
	ts.shutdown()
	ts.start()
}

func (ts *testServer) url() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.srv.ClientURL()
}

// connect opens a plain test connection that reconnects quickly forever.
func connect(t *testing.T, ts *testServer) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ts.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logBuf is a goroutine-safe log sink that outlives the test.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger() (zerolog.Logger, *logBuf) {
	lb := &logBuf{}
	return zerolog.New(lb).Level(zerolog.DebugLevel), lb
}

// testWait bounds a single wait for a message.
const testWait = 20 * time.Second

func timeAfter() <-chan time.Time { return time.After(testWait) }

func nopLogger() zerolog.Logger { return zerolog.Nop() }

// waitJetStream waits until JetStream answers on js's connection. Right after
// a server (re)start the first API requests can go unanswered.
func waitJetStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	waitFor(t, "jetstream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
}
