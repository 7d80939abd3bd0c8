package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("fairctl version: exit %d, stderr %q", code, errb.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "fairctl version ") || !strings.Contains(s, " revision ") || !strings.HasSuffix(s, runtime.Version()+"\n") {
		t.Fatalf("fairctl version printed %q", s)
	}
	if code := run(context.Background(), []string{"version", "x"}, &out, &errb); code != 2 {
		t.Fatalf("fairctl version x: exit %d, want 2", code)
	}
	// --json, before the command or after it, as on every read.
	for _, args := range [][]string{{"version", "--json"}, {"--json", "version"}} {
		out.Reset()
		var v struct {
			GoVersion string `json:"go_version"`
		}
		if code := run(context.Background(), args, &out, &errb); code != 0 || json.Unmarshal(out.Bytes(), &v) != nil || v.GoVersion != runtime.Version() {
			t.Errorf("fairctl %v: exit %d, %q; want JSON with go_version %s", args, code, out.String(), runtime.Version())
		}
	}
}
