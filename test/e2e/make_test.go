package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeRunStopsWithMake: SIGTERM to a background `make run` (to make alone,
// as `kill $!` in a script sends it) stops the dispatcher too and frees both of
// its ports. With `go run` in the recipe the dispatcher outlived make.
func TestMakeRunStopsWithMake(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is not installed: %v", err) // the Makefile is what is tested
	}
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	args := strings.Join([]string{"--nats-listen", natsAddr, "--http-addr", httpAddr,
		"--data-dir", filepath.Join(t.TempDir(), "data"), "--startup-grace", "0s", "--log-format", "json"}, " ")
	cmd := exec.Command("make", "--no-print-directory", "-C", "../..", "run", "DEMO=0", "BIN="+t.TempDir(), "ARGS="+args)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=")
	out, done := startProcess(t, "make run", cmd)
	up := func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	waitFor(t, 3*time.Minute, "make run to serve /healthz (it builds first)", func() bool {
		select {
		case err := <-done:
			t.Fatalf("make run exited early: %v", err)
		default:
		}
		return up()
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(t, done, 30*time.Second, "make after SIGTERM")
	free := func(addr string) bool {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	waitFor(t, 20*time.Second, "the dispatcher to stop and free both ports", func() bool {
		return !up() && free(httpAddr) && free(natsAddr)
	})
	if !strings.Contains(out.String(), "dispatcher stopped") {
		t.Errorf("the dispatcher did not log a clean stop:\n%s", tail(out.String(), 10))
	}
}
