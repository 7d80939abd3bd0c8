package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestDataDirLockRefusesASecondHolder: while one lock on a data directory is
// held, a second is refused with an error naming the directory and the
// holder; once released, the directory can be locked again.
func TestDataDirLockRefusesASecondHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := lockDataDir(dir, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir, time.Now())
	if !errors.Is(err, errDataDirInUse) {
		t.Fatalf("second lock: got %v, want errDataDirInUse", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid()), "since 2026-01-02T03:04:05Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	first.Release()
	again, err := lockDataDir(dir, time.Now())
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Release()
}

// TestEmbeddedServerTakenPortFailsAtOnce: a taken --nats-listen address is an
// error naming the address, not ten silent seconds.
func TestEmbeddedServerTakenPortFailsAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &settings{natsListen: l.Addr().String(), dataDir: t.TempDir()}
	srv, err := embeddedServer(s, zerolog.Nop())
	if err == nil {
		srv.Shutdown()
		t.Fatal("embedded server started on a taken port")
	}
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("got %v, want EADDRINUSE naming %s", err, l.Addr())
	}
}

// TestStartupBadPolicyPrintedLikeCheckConfig: a bad policy at start-up is
// printed one problem a line (file:line: path), as --check-config prints it,
// and the exit status is 1.
func TestStartupBadPolicyPrintedLikeCheckConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("default_policy_family: x\npolicy_classes:\n  - name: a\n    quantum: -1\n  - name: a\n    bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"--policy-config", p, "--log-format", "json"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut.String())
	}
	var check bytes.Buffer
	run([]string{"--check-config", p}, &out, &check)
	got := errOut.String()
	if got != check.String() {
		t.Errorf("start-up printed\n%s\nwant what --check-config prints:\n%s", got, check.String())
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) < 2 || strings.Contains(got, `\n`) {
		t.Fatalf("want one problem a line, got:\n%s", got)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, p+":") {
			t.Errorf("line %q does not start with %s:", l, p)
		}
	}
}

// TestHealthProbe: --health-probe exits 0 on 200 and 1 on anything else.
func TestHealthProbe(t *testing.T) {
	code := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }))
	defer srv.Close()
	var errOut bytes.Buffer
	if got := run([]string{"--health-probe", srv.URL + "/healthz"}, &bytes.Buffer{}, &errOut); got != 0 {
		t.Errorf("probe of a healthy server: exit %d, want 0 (%s)", got, errOut.String())
	}
	code = http.StatusServiceUnavailable
	if got := run([]string{"--health-probe", srv.URL + "/readyz"}, &bytes.Buffer{}, &errOut); got != 1 {
		t.Errorf("probe of a 503: exit %d, want 1", got)
	}
	addr := srv.Listener.Addr().String()
	srv.Close()
	if got := run([]string{"--health-probe", "http://" + addr + "/healthz"}, &bytes.Buffer{}, &errOut); got != 1 {
		t.Errorf("probe of nothing: exit %d, want 1", got)
	}
}
