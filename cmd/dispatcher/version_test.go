package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestVersionFlag: --version prints one line and exits 0 before anything else
// (no policy, no NATS); DISPATCHER_VERSION does not set it, since an image may
// well carry that variable with a version string in it.
func TestVersionFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version", "--policy-config", "/nonexistent.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("--version: exit %d, stderr %q", code, errb.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "dispatcher version ") || !strings.Contains(s, " revision ") ||
		!strings.HasSuffix(s, runtime.Version()+"\n") || strings.Count(s, "\n") != 1 {
		t.Fatalf("--version printed %q", s)
	}
	s, err := parseSettings(nil, env(map[string]string{"DISPATCHER_VERSION": "1.2.3"}), &bytes.Buffer{})
	if err != nil || s.version {
		t.Fatalf("DISPATCHER_VERSION=1.2.3: got version %v, err %v; want it ignored", s != nil && s.version, err)
	}
}
