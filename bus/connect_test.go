package bus

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func withUser(o *server.Options) {
	o.Username = "disp"
	o.Password = "s3cret"
}

func TestConnectWrongPasswordFailsFast(t *testing.T) {
	ts := startServer(t, withUser)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log, logs := testLogger()
	nc, err := Connect(ctx, Options{URL: ts.URL(), User: "disp", Password: "wrong"}, log)
	if err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	}
	if !errors.Is(err, ErrAuth) || !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("got %v, want ErrAuth wrapping nats.ErrAuthorization", err)
	}
	if ctx.Err() != nil {
		t.Error("Connect waited for the context instead of failing at once")
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("an auth error was retried:\n%s", logs.String())
	}
}

func TestConnectRightPasswordAndReconnect(t *testing.T) {
	ts := startServer(t, withUser)
	var disc, reconn atomic.Int32
	log, logs := testLogger()
	nc, err := Connect(ctxT(t), Options{
		URL: ts.URL(), Name: "test", User: "disp", Password: "s3cret",
		ReconnectWait: 20 * time.Millisecond,
		OnDisconnect:  func() { disc.Add(1) },
		OnReconnect:   func() { reconn.Add(1) },
	}, log)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	ts.Restart()
	waitFor(t, "reconnect callbacks", func() bool { return disc.Load() >= 1 && reconn.Load() >= 1 })
	waitFor(t, "state changes logged", func() bool {
		s := logs.String()
		return strings.Contains(s, "nats connected") && strings.Contains(s, "nats disconnected") &&
			strings.Contains(s, "nats reconnected") && strings.Contains(s, `"component":"bus"`)
	})
}

func TestConnectRetriesUntilContextEnds(t *testing.T) {
	ts := startServer(t, nil)
	url := ts.URL()
	ts.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	log, logs := testLogger()
	_, err := Connect(ctx, Options{URL: url}, log)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("no retry logged:\n%s", logs.String())
	}
}

// TestConnectInboxPrefix: the connection's reply subjects, and so its
// JetStream API answers, use the configured inbox prefix.
func TestConnectInboxPrefix(t *testing.T) {
	ts := startServer(t, nil)
	nc, err := Connect(ctxT(t), Options{URL: ts.URL(), InboxPrefix: "_INBOX_pool_a"}, nopLogger())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if got := nc.NewInbox(); !strings.HasPrefix(got, "_INBOX_pool_a.") {
		t.Errorf("inbox %q, want it under _INBOX_pool_a", got)
	}
}

func TestConnectRejectsBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"two auth methods": {User: "u", Password: "p", CredsFile: "x.creds"},
		"cert without key": {TLSCert: "c.pem"},
		"missing CA file":  {TLSCA: "/nonexistent/ca.pem"},
		"missing nkey":     {NKeyFile: "/nonexistent/seed.nk"},
		"wildcard inbox":   {InboxPrefix: "_INBOX_x.*"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := Connect(ctx, o, nopLogger())
		if err == nil {
			t.Errorf("%s: got nil error", name)
		}
		if ctx.Err() != nil {
			t.Errorf("%s: waited for the context", name)
		}
		cancel()
	}
}

// TestConnectClosedForGood: a protocol line longer than the server's
// max_control_line (a publish to a subject of 5,000 bytes) makes the server
// close the connection, and nats.go does not reconnect from that: OnClosed
// tells the owner, with the error, so that it can stop rather than run on
// without a connection.
func TestConnectClosedForGood(t *testing.T) {
	ts := startServer(t, nil)
	closed := make(chan error, 1)
	log, _ := testLogger()
	nc, err := Connect(ctxT(t), Options{URL: ts.URL(), OnClosed: func(err error) { closed <- err }}, log)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish(strings.Repeat("a", 5000), nil); err != nil {
		t.Fatalf("publish: %v", err)
	}
	_ = nc.Flush()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "control line") {
			t.Errorf("OnClosed(%v), want the server's maximum control line error", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("OnClosed was not called")
	}
}
