package e2e

import (
	"net"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestWorkerAndLoadgenWaitForNATS: the mock worker and the load generator
// started before NATS (as a Compose stack starts them) wait for it, retrying,
// instead of exiting; once NATS and a dispatcher are up, the load generator's
// requests complete on the mock worker. Until then the address answers every
// connection by closing it, so both programs are seen failing to connect first.
func TestWorkerAndLoadgenWaitForNATS(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	bins := buildPrograms(t, t.TempDir(), "mockworker", "loadgen")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	url := "nats://" + l.Addr().String()
	var attempts atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			attempts.Add(1)
			c.Close()
		}
	}()

	w := exec.Command(bins["mockworker"], "--nats-url", url, "--id", "wwait")
	_, wDone := startProcess(t, "mockworker", w)
	_, lgDone := startProcess(t, "loadgen", exec.Command(bins["loadgen"], "--nats-url", url, "--class", "default:20", "--isl", "10", "--quiet", "--timeout", "60s"))
	waitFor(t, 20*time.Second, "both programs to try to connect at least twice", func() bool {
		for _, done := range []chan error{wDone, lgDone} {
			select {
			case err := <-done:
				t.Fatalf("a program exited while NATS was not up: %v", err)
			default:
			}
		}
		return attempts.Load() >= 4
	})
	l.Close()

	ns := startNATS(t, func(o *server.Options) { o.Port = port })
	startDispatcher(t, ns.URL())
	if err := waitExit(t, lgDone, 90*time.Second, "loadgen"); err != nil {
		t.Fatalf("loadgen: %v, want exit 0 with every request completed", err)
	}
	select {
	case err := <-wDone:
		t.Fatalf("mockworker exited: %v", err)
	default:
	}
	_ = w.Process.Signal(syscall.SIGTERM)
	if err := waitExit(t, wDone, 30*time.Second, "mockworker after SIGTERM"); err != nil {
		t.Errorf("mockworker after SIGTERM: %v, want exit 0", err)
	}
}
