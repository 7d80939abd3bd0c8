package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
)

// startServer starts an embedded nats-server with JetStream that can be
// restarted on the same port and store directory (natstest.Server).
func startServer(t *testing.T, mod func(*server.Options)) *natstest.Server {
	t.Helper()
	return natstest.Start(t, mod)
}

// connect opens a plain test connection that reconnects quickly forever.
func connect(t *testing.T, ts *natstest.Server) *nats.Conn {
	t.Helper()
	return ts.Connect(t)
}

// withStreams starts a server (mod as for startServer), creates the
// dispatcher's streams on it, and returns a JetStream client of it.
func withStreams(t *testing.T, mod func(*server.Options)) jetstream.JetStream {
	t.Helper()
	js := newJS(t, connect(t, startServer(t, mod)))
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	return js
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
	natstest.Eventually(t, 20*time.Second, cond, "%s", what)
}

func testLogger() (zerolog.Logger, *natstest.Buffer) {
	lb := &natstest.Buffer{}
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
