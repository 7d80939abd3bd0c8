package workerkit

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
)

// TestConnectWaitsForTheServer: Connect started before any server listens on
// the address returns a connected client once one does (a Compose stack starts
// workers and NATS together), and gives up when its context ends.
func TestConnectWaitsForTheServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url := "nats://" + l.Addr().String()

	type result struct {
		ok  bool
		err error
	}
	got := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		nc, err := Connect(ctx, url)
		if err != nil {
			got <- result{false, err}
			return
		}
		defer nc.Close()
		got <- result{nc.IsConnected(), nil}
	}()
	// Not connected while nothing listens (the first attempts have failed
	// by the time the server has started below, whatever the timing).
	select {
	case r := <-got:
		t.Fatalf("Connect returned before any server listened: connected=%v err=%v", r.ok, r.err)
	default:
	}
	startServer(t, &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	select {
	case r := <-got:
		if r.err != nil || !r.ok {
			t.Fatalf("Connect: connected=%v err=%v, want connected", r.ok, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Connect did not return after the server started")
	}

	// A context that ends first: an error, not a hang.
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	nc, err := Connect(short, "nats://127.0.0.1:1")
	if err == nil {
		nc.Close()
		t.Fatal("Connect to nothing succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error") {
		t.Errorf("Connect to nothing: %v; want the deadline, naming the last attempt's error", err)
	}
}

// TestConnectRefusedAtOnce: a server that rejects the credentials ends
// Connect at once with the server's reason, long before its context would.
func TestConnectRefusedAtOnce(t *testing.T) {
	s := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "u", "right" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := Connect(ctx, s.URL(), nats.UserInfo("u", "wrong"))
	if err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	}
	if !errors.Is(err, nats.ErrAuthorization) || ctx.Err() != nil {
		t.Fatalf("Connect: %v (context: %v); want nats.ErrAuthorization before the context ends", err, ctx.Err())
	}
}

// TestUntilClosed: the context ends when the server stops taking the
// connection's credentials (a password rotated by a configuration reload), as
// nats.go then closes it for good, and the error names why; a context that
// its parent ended reports no close, even once the program closes the
// connection on its way out.
func TestUntilClosed(t *testing.T) {
	opts := func(password string, port int) *server.Options {
		return &server.Options{Host: "127.0.0.1", Port: port, Username: "w", Password: password, NoLog: true, NoSigs: true}
	}
	srv := startServer(t, opts("first", -1))
	url := srv.ClientURL()
	dial := func() *nats.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc, err := Connect(ctx, url, nats.UserInfo("w", "first"))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}

	parent, cancelParent := context.WithCancel(context.Background())
	nc := dial()
	ctx, closed := UntilClosed(parent, nc)
	kept := dial()
	defer kept.Close()
	cancelParent()
	<-ctx.Done()
	nc.Close()
	if err := closed(); err != nil {
		t.Errorf("after the parent ended and the program closed the connection: %v, want nil", err)
	}
	// The program's own close does not end the context (checked on a
	// connection closed already, as the handler runs asynchronously).
	own := dial()
	own.Close()
	ownCtx, ownClosed := UntilClosed(context.Background(), own)
	if ownCtx.Err() != nil || ownClosed() != nil {
		t.Errorf("the program's own Close ended the context: %v", context.Cause(ownCtx))
	}
	// Nor after a transient error, which nats.go keeps as the last error: a
	// slow consumer.
	slow := dial()
	block := make(chan struct{})
	defer close(block)
	sub, err := slow.Subscribe("slow", func(*nats.Msg) { <-block })
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(1, -1); err != nil {
		t.Fatal(err)
	}
	pub := dial()
	defer pub.Close()
	natstest.Eventually(t, 10*time.Second, func() bool {
		_ = pub.Publish("slow", []byte("x"))
		_ = pub.Flush()
		return errors.Is(slow.LastError(), nats.ErrSlowConsumer)
	}, "a slow consumer")
	slow.Close()
	if ctx, closed := UntilClosed(context.Background(), slow); ctx.Err() != nil || closed() != nil {
		t.Errorf("the program's own Close after a slow consumer ended the context: %v", context.Cause(ctx))
	}

	ctx, closed = UntilClosed(context.Background(), kept)
	if err := srv.ReloadOptions(opts("second", srv.Addr().(*net.TCPAddr).Port)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the context did not end after the server refused the connection's password")
	}
	if err := closed(); !errors.Is(err, ErrClosed) || !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("closed() = %v, want ErrClosed wrapping nats.ErrAuthorization", err)
	}
}

// startServer starts a nats-server with o, shut down at the end of the test.
func startServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv
}
