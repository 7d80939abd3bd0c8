package e2e

import (
	"fairdispatch/internal/natstest"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// topScenario starts a dispatcher whose only worker, wbusy, reports 5000
// active prefill tokens, which closes the gate of the class limited, and
// queues 7 requests of 10 tokens there: the scenario of docs/operations.md,
// Queues, workers and fairctl top. publish queues n more, from id number from.
func topScenario(t *testing.T) (*natsServer, *proc, func(from, n int)) {
	t.Helper()
	f, _ := startBusy(t, "top")
	ns, js, p := f.ns, f.js, f.p
	publish := func(from, n int) {
		for i := from; i < from+n; i++ {
			publish(t, js, "dispatch.req.limited", fmt.Sprintf("top-%d", i), map[string]string{"Dispatch-ISL-Tokens": "10"}, nil)
		}
	}
	publish(0, 7)
	waitFor(t, 10*time.Second, "7 requests queued", func() bool {
		v, ok := p.queues()
		return ok && v.pending("limited") == 7
	})
	return ns, p, publish
}

// tmuxCmd runs tmux on the test's own server socket.
func tmuxCmd(sock string, args ...string) *exec.Cmd {
	return exec.Command("tmux", append([]string{"-L", sock}, args...)...)
}

// topRow returns the fields of the first line of pane whose first field is name.
func topRow(pane, name string) []string {
	for _, line := range strings.Split(pane, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

// TestFairctlTopUnderTmux runs fairctl top in a tmux pane against a
// dispatcher with queued requests and a loaded worker, reads the rendered
// numbers with capture-pane, checks a redraw shows new requests, and quits
// with q (docs/operations.md, Queues, workers and fairctl top). Without tmux it
// skips, and fails under CI=true (.ci/run installs tmux).
func TestFairctlTopUnderTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		natstest.Missing(t, "tmux is not installed (apt-get install tmux): CI must run the fairctl top test (.ci/run installs it)")
	}
	ns, p, publish := topScenario(t)

	sock := fmt.Sprintf("fairctl-top-%d", os.Getpid())
	cmd := fmt.Sprintf("%s --server %s --admin http://%s top", fairctl(t), ns.URL(), p.httpAddr)
	if out, err := tmuxCmd(sock, "new-session", "-d", "-s", "top", "-x", "160", "-y", "40", cmd).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = tmuxCmd(sock, "kill-server").Run() })
	var pane string
	capture := func() string {
		out, err := tmuxCmd(sock, "capture-pane", "-p", "-t", "top").Output()
		if err != nil {
			return ""
		}
		pane = string(out)
		return pane
	}
	defer func() {
		if t.Failed() {
			t.Logf("last pane:\n%s", pane)
		}
	}()
	// The class table: backlog 7 at ISL 10 each; the worker table: wbusy's
	// reported prefill.
	waitFor(t, 20*time.Second, "top showing limited with backlog 7 and wbusy's load", func() bool {
		capture()
		c, w := topRow(pane, "limited"), topRow(pane, "wbusy")
		return len(c) >= 5 && c[1] == "7" && c[2] == "70" && c[3] != "-" &&
			len(w) >= 4 && w[1] == "0" && w[3] == "5000"
	})
	if !strings.Contains(pane, "fairctl top") || !strings.Contains(pane, "held 7") {
		t.Errorf("top's header: want fairctl top and held 7")
	}
	// The frame pasted in docs/operations.md is this one.
	for _, b := range docBlocks(t, "Queues, workers and `fairctl top`") {
		if len(b.args) > 0 && b.args[len(b.args)-1] == "top" {
			if got, want := docNormal(pane), docNormal(b.want); got != want {
				t.Errorf("docs/operations.md: the pasted fairctl top frame is stale; now:\n%s\n(normalized %q, pasted %q)", pane, got, want)
			}
		}
	}
	// A redraw: three more requests show without touching the terminal.
	publish(7, 3)
	waitFor(t, 20*time.Second, "top redrawn with backlog 10", func() bool {
		capture()
		c := topRow(pane, "limited")
		return len(c) >= 3 && c[1] == "10" && c[2] == "100"
	})
	// q quits: the pane's command ends and its session with it.
	if out, err := tmuxCmd(sock, "send-keys", "-t", "top", "q").CombinedOutput(); err != nil {
		t.Fatalf("tmux send-keys: %v: %s", err, out)
	}
	waitFor(t, 10*time.Second, "fairctl top to quit on q", func() bool {
		return tmuxCmd(sock, "has-session", "-t", "top").Run() != nil
	})
}
