package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

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
		var out, errb bytes.Buffer
		if got := run(context.Background(), tt.args, &out, &errb); got != tt.code {
			t.Errorf("run(%q) = %d, want %d (stderr %q)", tt.args, got, tt.code, errb.String())
		}
		if !strings.Contains(errb.String(), tt.want) {
			t.Errorf("run(%q) stderr %q, want it to contain %q", tt.args, errb.String(), tt.want)
		}
	}
}
