package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// checkRun runs fairctl with args and checks its exit status is code and its
// standard error contains want.
func checkRun(t *testing.T, args []string, code int, want string) {
	t.Helper()
	var out, errb bytes.Buffer
	if got := run(context.Background(), args, &out, &errb); got != code {
		t.Errorf("run(%q) = %d, want %d (stderr %q)", args, got, code, errb.String())
	}
	if !strings.Contains(errb.String(), want) {
		t.Errorf("run(%q) stderr %q, want it to contain %q", args, errb.String(), want)
	}
}

func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: fairctl"},
		{[]string{"no-such-command"}, 2, `unknown command "no-such-command"`},
		{[]string{"--subject-prefix", "a/b", "x"}, 2, "--subject-prefix"},
		{[]string{"--help"}, 0, "global flags"},
	}
	for _, tt := range tests {
		checkRun(t, tt.args, tt.code, tt.want)
	}
}
