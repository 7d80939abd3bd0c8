package e2e

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"fairdispatch/internal/fakeengine"
)

// TestProgramsExitWhenTheirConnectionClosesForGood: when the server stops
// taking a program's credentials (an operator rotates the password and
// reloads), nats.go closes the connection for good after its reconnect is
// refused twice. Every long-running program (the dispatcher, the gateway, the
// mock worker, the engine worker, the load generator) then exits non-zero,
// naming the close, so that its supervisor restarts it with the new secret,
// instead of staying up with a connection that can never carry a request.
// (Each also answers --version.)
func TestProgramsExitWhenTheirConnectionClosesForGood(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	dir := t.TempDir()
	bins := buildPrograms(t, dir, "gateway", "mockworker", "engineworker", "loadgen")
	for name, bin := range bins {
		// Each says what it is, as every program of the repository does.
		if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), name+" ") {
			t.Errorf("%s --version: %v, %q; want exit 0 and a line starting %q", name, err, out, name+" ")
		}
	}
	auth := func(password string) func(*server.Options) {
		return func(o *server.Options) { o.Username, o.Password = "app", password }
	}
	n := startNATS(t, auth("first-secret"))
	disp := launch(t, n.URL(), "--nats-user", "app", "--nats-password", "first-secret")

	engine, err := fakeengine.New(context.Background(), fakeengine.Config{MaxNumSeqs: 4, NumGPUBlocks: 400, DecodePerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(engine.Handler())
	t.Cleanup(func() { srv.Close(); engine.Close() })
	gwConf := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(gwConf, []byte(gwConfig(gwOptions{tenants: []gwTenant{{name: "acme", classes: "[default]"}}})), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"--nats-url", n.URL(), "--nats-user", "app", "--nats-password", "first-secret"}
	programs := map[string][]string{
		"gateway":      {"--config", gwConf, "--listen", freeAddr(t), "--admin-addr", ""},
		"mockworker":   {"--id", "m1"},
		"engineworker": {"--id", "e1", "--engine-url", srv.URL, "--max-num-seqs", "4"},
		// Slow and long: still running when the password changes.
		"loadgen": {"--class", "default:100000", "--rate", "5", "--quiet", "--timeout", "10m"},
	}
	done := map[string]chan error{}
	outs := map[string]interface{ String() string }{}
	for name, args := range programs {
		out, d := startProcess(t, name, exec.Command(bins[name], append(common, args...)...))
		outs[name], done[name] = out, d
	}
	// Every program connected: the server lists a connection of each name.
	names := []string{"fairdispatch-dispatcher", "fairdispatch-gateway", "mockworker m1", "engineworker e1", "loadgen"}
	waitFor(t, 60*time.Second, "every program connected", func() bool {
		for name, d := range done {
			select {
			case err := <-d:
				t.Fatalf("%s exited before the password changed: %v\n%s", name, err, outs[name])
			default:
			}
		}
		cz, err := n.Running().Connz(&server.ConnzOptions{})
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, c := range cz.Conns {
			seen[c.Name] = true
		}
		for _, name := range names {
			if !seen[name] {
				return false
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "the workers live", func() bool { return disp.metric("fairdispatch_live_workers") == 2 })

	n.Reload(auth("second-secret"))

	for name, d := range done {
		err := waitExit(t, d, 60*time.Second, name)
		if err == nil || !containsAll(outs[name].String(), "nats connection closed for good", "uthorization") {
			t.Errorf("%s after its password stopped working: %v\n%s\nwant a non-zero exit naming the close and its reason", name, err, tail(outs[name].String(), 15))
		}
	}
	select {
	case <-disp.done:
		if disp.err == nil || !containsAll(disp.out.String(), "nats connection closed for good") {
			t.Errorf("dispatcher: %v\n%s\nwant a non-zero exit naming the close", disp.err, tail(disp.out.String(), 15))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the dispatcher did not exit after its password stopped working")
	}
}
