package e2e

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/bus"
	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
)

// externalNATSEnv names a nats-server binary to test against; when it is
// empty, nats-server is looked up on PATH (Debian's package installs it in
// /usr/sbin, which .ci/run installs).
const externalNATSEnv = "FAIRDISPATCH_NATS_SERVER"

// externalNATS starts a separate nats-server binary with JetStream on a free
// loopback port and returns its URL and the version it announces. Without a
// binary the test fails under CI=true and is skipped otherwise.
func externalNATS(t *testing.T) (url, version string) {
	t.Helper()
	bin := natstest.Program(t, externalNATSEnv, "install one (apt-get install nats-server) to run the external-server tests",
		"nats-server", "/usr/sbin/nats-server", "/usr/local/sbin/nats-server")
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	out, done := startProcess(t, "nats-server", exec.Command(bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir()))
	url = "nats://" + addr
	var nc *nats.Conn
	waitFor(t, 20*time.Second, bin+" accepting connections", func() bool {
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", bin, tail(out.String(), 40))
		default:
		}
		c, err := nats.Connect(url)
		if err != nil {
			return false
		}
		nc = c
		return true
	})
	version = nc.ConnectedServerVersion()
	nc.Close()
	t.Logf("%s is nats-server %s", bin, version)
	return url, version
}

// TestExternalNATSServer runs the dispatcher against a separate nats-server
// binary (Debian's package in CI). When that server is older than
// bus.MinServerVersion the dispatcher must refuse it at start-up with an error
// naming both versions; otherwise requests are published, dispatched to a
// worker, acknowledged, and the request stream ends empty.
func TestExternalNATSServer(t *testing.T) {
	url, version := externalNATS(t)
	if err := bus.CheckServerVersion(version); errors.Is(err, bus.ErrServerTooOld) {
		p := launch(t, url)
		err := p.wait(30 * time.Second)
		out := p.out.String()
		if err == nil {
			t.Fatalf("dispatcher exited 0 on nats-server %s, want a refusal", version)
		}
		if !strings.Contains(out, version) || !strings.Contains(out, bus.MinServerVersion) || !strings.Contains(out, "too old") {
			t.Fatalf("dispatcher output does not name nats-server %s as too old against %s:\n%s", version, bus.MinServerVersion, tail(out, 20))
		}
		return
	} else if err != nil {
		t.Fatal(err)
	}

	const n = 20
	p := startDispatcher(t, url)
	nc := connect(t, url)
	startMock(t, nc, mockworker.Config{ID: "w1", OutputTokens: 1})
	waitLive(t, p, "w1")
	res := runLoad(t, nc, defaultLoad("external", n))
	frlCheckAllOn(t, res, n, "w1")
	js := jsOf(t, nc)
	waitFor(t, 20*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, "DISPATCH_DLQ"); err != nil {
		t.Fatalf("DLQ stream on nats-server %s: %v", version, err)
	}
}
