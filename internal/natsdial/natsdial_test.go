package natsdial

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natstest"
)

// quick is the backoff of these tests: 10 ms between attempts.
func quick() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Millisecond) }

// steps is a backoff that waits waits[0], waits[1], ... in turn, then its
// last wait forever.
type steps struct {
	waits []time.Duration
	n     int
}

func (s *steps) NextBackOff() time.Duration {
	w := s.waits[min(s.n, len(s.waits)-1)]
	s.n++
	return w
}

func (s *steps) Reset() { s.n = 0 }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestDialGivesUpOnRepeatedClosesAfterTLS: a server that closes every
// connection right after the TLS handshake (a refused client certificate
// whose alert lost the race with the close) is a refusal after
// ClosedAfterTLSAttempts attempts, not a server to wait for.
func TestDialGivesUpOnRepeatedClosesAfterTLS(t *testing.T) {
	s := natstest.StartClosingTLSServer(t, 1<<40)
	_, n, err := Dial(ctxT(t), s.URL, []nats.Option{nats.RootCAs(s.CAFile)}, quick(), nil)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Closes != ClosedAfterTLSAttempts || !strings.Contains(err.Error(), "right after the TLS handshake") {
		t.Fatalf("Dial: %v; want a *RefusedError naming %d closes after the TLS handshake", err, ClosedAfterTLSAttempts)
	}
	if n != ClosedAfterTLSAttempts || s.Conns.Load() != ClosedAfterTLSAttempts {
		t.Errorf("%d attempts (%d connections), want %d", n, s.Conns.Load(), ClosedAfterTLSAttempts)
	}
}

// TestDialRetriesFewerClosesAfterTLS: closes after the handshake that stop
// short of ClosedAfterTLSAttempts (a server restarting at that moment) are
// retried, and the next attempt connects.
func TestDialRetriesFewerClosesAfterTLS(t *testing.T) {
	s := natstest.StartClosingTLSServer(t, ClosedAfterTLSAttempts-1)
	var retried []int
	nc, n, err := Dial(ctxT(t), s.URL, []nats.Option{nats.RootCAs(s.CAFile)}, quick(), func(attempt int, err error) {
		if !ClosedAfterTLS(err) {
			t.Errorf("attempt %d: %v, want a close after the TLS handshake", attempt, err)
		}
		retried = append(retried, attempt)
	})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	nc.Close()
	if n != ClosedAfterTLSAttempts || len(retried) != ClosedAfterTLSAttempts-1 {
		t.Errorf("%d attempts, retried %v; want %d attempts, the first %d retried", n, retried, ClosedAfterTLSAttempts, ClosedAfterTLSAttempts-1)
	}
}

// TestDialRefusedCredentials: a wrong password ends Dial at the first
// attempt with a *RefusedError wrapping nats.ErrAuthorization.
func TestDialRefusedCredentials(t *testing.T) {
	s := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "u", "right" })
	_, n, err := Dial(ctxT(t), s.URL(), []nats.Option{nats.UserInfo("u", "wrong")}, quick(), func(int, error) {
		t.Error("a refused password was retried")
	})
	var refused *RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, nats.ErrAuthorization) || n != 1 {
		t.Fatalf("Dial: %v after %d attempts; want a *RefusedError wrapping nats.ErrAuthorization after 1", err, n)
	}
}

// TestDialWaitsForTheServer: attempts against an address nothing listens on
// are retried until the context ends, and the error then names the last
// attempt's. The wait after the third attempt, when the context is
// cancelled, is an hour: only the context's end can stop it.
func TestDialWaitsForTheServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &steps{waits: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, time.Hour}}
	_, n, err := Dial(ctx, url, nil, b, func(attempt int, _ error) {
		if attempt == 3 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "last error: nats: no servers available") || n != 3 {
		t.Fatalf("Dial: %v after %d attempts; want context.Canceled naming the last error, after 3", err, n)
	}
}

// TestDialFilesAndURLs: a file that does not exist, a URL that does not parse
// and an option that refuses its value end Dial at once; no retry fixes them.
func TestDialFilesAndURLs(t *testing.T) {
	s := natstest.Start(t, nil)
	missing := filepath.Join(t.TempDir(), "missing.creds")
	for _, c := range []struct {
		name, url string
		opts      []nats.Option
		want      func(error) bool
	}{
		{"missing creds file", s.URL(), []nats.Option{nats.UserCredentials(missing)}, func(err error) bool {
			var pe *fs.PathError
			return errors.As(err, &pe)
		}},
		{"malformed url", "nats://[::1", nil, func(err error) bool { return strings.Contains(err.Error(), "parse") }},
		{"missing CA file", s.URL(), []nats.Option{nats.RootCAs(missing)}, func(err error) bool { return strings.Contains(err.Error(), "missing.creds") }},
		{"invalid inbox prefix", s.URL(), []nats.Option{nats.CustomInboxPrefix("_INBOX.*")}, func(err error) bool { return strings.Contains(err.Error(), "prefix") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, n, err := Dial(ctxT(t), c.url, c.opts, quick(), func(_ int, err error) {
				t.Errorf("retried: %v", err)
			})
			if err == nil || !c.want(err) || n > 1 {
				t.Fatalf("Dial: %v after %d attempts; want the error at once", err, n)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	got := Redact("nats://u:secret@a:4222, nats://b:4222")
	if strings.Contains(got, "secret") || !strings.Contains(got, "nats://b:4222") {
		t.Errorf("Redact: %q", got)
	}
}
