package bus

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestCheckServerVersion(t *testing.T) {
	for _, c := range []struct {
		v       string
		tooOld  bool
		invalid bool
	}{
		{"2.9.0", false, false},
		{"2.9.10", false, false},
		{"2.10.22", false, false},
		{"v2.15.2", false, false},
		{"3.0.0", false, false},
		{"2.9.0-RC.1", false, false},
		{"2.8.4", true, false},
		{"2.2.0", true, false},
		{"1.9.99", true, false},
		{"", false, true},
		{"2", false, true},
		{"2.x.1", false, true},
	} {
		err := CheckServerVersion(c.v)
		switch {
		case c.invalid:
			if err == nil || errors.Is(err, ErrServerTooOld) {
				t.Errorf("%q: got %v, want an unreadable version", c.v, err)
			}
		case c.tooOld:
			if !errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), c.v) || !strings.Contains(err.Error(), MinServerVersion) {
				t.Errorf("%q: got %v, want ErrServerTooOld naming %s and %s", c.v, err, c.v, MinServerVersion)
			}
		default:
			if err != nil {
				t.Errorf("%q: got %v, want nil", c.v, err)
			}
		}
	}
}

// fakeServer speaks just enough of the NATS client protocol to complete a
// connection while announcing version, as an old nats-server would.
func fakeServer(t *testing.T, version string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"FAKE\",\"version\":%q,\"go\":\"go1\",\"host\":\"127.0.0.1\",\"port\":4222,\"headers\":true,\"max_payload\":1048576,\"proto\":1}\r\n", version)
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						fmt.Fprint(c, "PONG\r\n")
					}
				}
			}()
		}
	}()
	return "nats://" + l.Addr().String()
}

// TestConnectRefusesAnOldServer: a server older than MinServerVersion is
// refused at once (no retries), with an error naming both versions.
func TestConnectRefusesAnOldServer(t *testing.T) {
	url := fakeServer(t, "2.8.4")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := Connect(ctx, Options{URL: url}, nopLogger())
	if nc != nil {
		nc.Close()
	}
	if !errors.Is(err, ErrServerTooOld) || !strings.Contains(err.Error(), "2.8.4") || !strings.Contains(err.Error(), MinServerVersion) {
		t.Fatalf("got %v, want ErrServerTooOld naming 2.8.4 and %s", err, MinServerVersion)
	}
	if ctx.Err() != nil {
		t.Fatal("Connect retried until the context ended, want a refusal at once")
	}
}

// TestConnectAcceptsTheOldestSupported: the same fake at MinServerVersion connects.
func TestConnectAcceptsTheOldestSupported(t *testing.T) {
	url := fakeServer(t, MinServerVersion)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := Connect(ctx, Options{URL: url}, nopLogger())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
