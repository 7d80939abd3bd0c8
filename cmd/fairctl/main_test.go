package main

import (
	"bytes"
	"context"
	"io"
	"slices"
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
		{[]string{"queues", "--subject-prefix", "a/b"}, 2, "--subject-prefix"},
		{[]string{"queues", "--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{[]string{"--help"}, 0, "global flags"},
	}
	for _, tt := range tests {
		checkRun(t, tt.args, tt.code, tt.want)
	}
}

// TestGlobalsParse: a subcommand takes the global flags as well as its own,
// flags and arguments in any order, everything after "--" an argument.
func TestGlobalsParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		json bool
		n    int
	}{
		{[]string{"7", "--json"}, []string{"7"}, true, 0},
		{[]string{"--json", "7", "-n", "3", "8"}, []string{"7", "8"}, true, 3},
		{[]string{"7", "--", "--json", "-n"}, []string{"7", "--json", "-n"}, false, 0},
		{[]string{"--", "-n"}, []string{"-n"}, false, 0},
		{nil, nil, false, 0},
	} {
		g := &globals{stderr: io.Discard}
		fs := g.flagSet("x")
		n := fs.Int("n", 0, "a subcommand's own flag")
		if err := g.parse(fs, tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if !slices.Equal(fs.Args(), tc.pos) || g.json != tc.json || *n != tc.n {
			t.Errorf("%q: arguments %q, json %v, n %d; want %q, %v, %d", tc.args, fs.Args(), g.json, *n, tc.pos, tc.json, tc.n)
		}
	}
}

// TestHelpShowsNoSecret: a password or an admin token, from the environment
// or from a flag before the command, is not printed as a flag's default.
func TestHelpShowsNoSecret(t *testing.T) {
	t.Setenv("NATS_PASSWORD", "hunter2")
	t.Setenv("DISPATCHER_ADMIN_TOKEN", "tok123")
	for _, args := range [][]string{{"--help"}, {"--password", "pw-flag", "queues", "--help"}, {"queues", "--help"}} {
		var out, errb bytes.Buffer
		run(context.Background(), args, &out, &errb)
		for _, s := range []string{"hunter2", "tok123", "pw-flag"} {
			if strings.Contains(out.String()+errb.String(), s) {
				t.Errorf("fairctl %q printed %q:\n%s", args, s, errb.String())
			}
		}
		if !strings.Contains(errb.String(), "-password") {
			t.Errorf("fairctl %q: no -password in the help:\n%s", args, errb.String())
		}
	}
	g := &globals{stderr: io.Discard}
	fs := g.flagSet("x")
	if err := g.parse(fs, []string{"--password", "p1", "--admin-token", "t1"}); err != nil || g.password != "p1" || g.adminToken != "t1" {
		t.Fatalf("parse: %v, password %q, token %q; want p1, t1", err, g.password, g.adminToken)
	}
}

// TestGlobalFlagsBeforeTheSubcommand: a global flag between a command and its
// subcommand (fairctl dlq --json ls, policy --timeout 1s get) is taken, as
// anywhere after the command; an unknown one there is still refused.
func TestGlobalFlagsBeforeTheSubcommand(t *testing.T) {
	g := &globals{stderr: io.Discard}
	for _, c := range []struct{ in, want []string }{
		{[]string{"--json", "ls", "--class", "c"}, []string{"ls", "--json", "--class", "c"}},
		{[]string{"--timeout", "1s", "--json", "get"}, []string{"get", "--timeout", "1s", "--json"}},
		{[]string{"--timeout=1s", "show", "7"}, []string{"show", "--timeout=1s", "7"}},
		{[]string{"ls", "--json"}, []string{"ls", "--json"}},
		{[]string{"--no-such", "ls"}, []string{"--no-such", "ls"}},
	} {
		if got := g.subcommandFirst(slices.Clone(c.in)); !slices.Equal(got, c.want) {
			t.Errorf("subcommandFirst(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	checkRun(t, []string{"dlq", "--no-such", "ls"}, 2, `unknown subcommand "--no-such"`)
}
