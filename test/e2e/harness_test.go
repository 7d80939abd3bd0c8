package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
)

// dispatcherBin is the dispatcher binary built once by TestMain.
var dispatcherBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fairdispatch-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dispatcherBin = filepath.Join(dir, "dispatcher")
	args := []string{"build", "-o", dispatcherBin}
	if raceBuild {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "fairdispatch/cmd/dispatcher")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the dispatcher:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	natstest.Eventually(t, timeout, cond, "%s", what)
}

// natsServer is an embedded nats-server with JetStream, restartable on the same
// port and storage.
type natsServer = natstest.Server

func startNATS(t testing.TB, mod ...func(*server.Options)) *natsServer {
	t.Helper()
	var m func(*server.Options)
	if len(mod) > 0 {
		m = mod[0]
	}
	return natstest.Start(t, m)
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func jsOf(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// proc is a dispatcher subprocess.
type proc struct {
	t        testing.TB
	cmd      *exec.Cmd
	httpAddr string
	out      *natstest.Buffer
	done     chan struct{}
	err      error
}

// dispatcherArgs are the defaults every e2e dispatcher runs with: short ack
// wait and grace so that recovery is observable in seconds.
func dispatcherArgs(url string) []string {
	return []string{"--nats-url", url, "--ack-wait", "4s", "--dispatch-timeout", "2s",
		"--startup-grace", "300ms", "--log-format", "json", "--log-level", "info"}
}

// startDispatcher starts the dispatcher binary with the default arguments plus
// extra (later flags win) and waits until /readyz says ready, or not ready
// only for want of a live worker.
func startDispatcher(t testing.TB, url string, extra ...string) *proc {
	t.Helper()
	p := launch(t, url, extra...)
	p.waitReady()
	return p
}

// launch starts the dispatcher without waiting for it.
func launch(t testing.TB, url string, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	args := append(dispatcherArgs(url), "--http-addr", addr)
	args = append(args, extra...)
	p := &proc{t: t, cmd: exec.Command(dispatcherBin, args...), httpAddr: addr, out: &natstest.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("dispatcher output:\n%s", tail(p.out.String(), 60))
		}
	})
	return p
}

func (p *proc) waitReady() {
	p.t.Helper()
	waitFor(p.t, 20*time.Second, "dispatcher /readyz", func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("dispatcher exited: %v\n%s", p.err, tail(p.out.String(), 40))
		default:
		}
		// Ready, or ready but for workers: most tests start them next
		// (docs/design.md, Fleet outage).
		code, body := p.get("/readyz")
		return code == http.StatusOK || (code == http.StatusServiceUnavailable && strings.Contains(body, "no live workers"))
	})
}

func (p *proc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.httpAddr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the sum of every sample of a Prometheus metric whose line
// starts with name (and, when given, contains every label fragment).
func (p *proc) metric(name string, labels ...string) float64 {
	_, body := p.get("/metrics")
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		if !containsAll(line, labels...) {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
			sum += v
		}
	}
	return sum
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// wait waits for the process to exit.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("dispatcher did not exit within %v", timeout)
		return nil
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// dispatchHeader returns the headers of a dispatch tapped on
// <prefix>.work.<id> as the header form sends them, whichever form it came in
// (natstest.DispatchHeader): the Go helper's workers ask for the compact form.
func dispatchHeader(t *testing.T, m *nats.Msg) nats.Header {
	h, _, err := natstest.DispatchHeader(m)
	if err != nil {
		t.Errorf("a dispatch in neither form: %v", err)
		return nats.Header{}
	}
	return h
}
