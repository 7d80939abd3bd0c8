package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"fairdispatch/internal/natstest"
)

// timestamps are the parts of the output that differ from run to run.
var timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// normalise makes a transcript comparable: times replaced, trailing blanks cut.
func normalise(s string) string {
	s = timestamps.ReplaceAllString(s, "<time>")
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// liveSection returns the console blocks of docs/operations.md's "Live
// policy" section, joined.
func liveSection(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Live policy\n")
	if !ok {
		t.Fatal("docs/operations.md has no section Live policy")
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var blocks []string
	for {
		_, rest, ok := strings.Cut(sec, "```console\n")
		if !ok {
			break
		}
		block, after, _ := strings.Cut(rest, "```")
		blocks = append(blocks, block)
		sec = after
	}
	return strings.Join(blocks, "")
}

// TestPolicyCommandsAsDocumented runs the fairctl policy commands pasted in
// docs/operations.md, Live policy, in order, against an embedded server, and
// requires the output pasted there (times aside). "$ echo $?" prints the
// last exit status. File names are those of testdata/.
func TestPolicyCommandsAsDocumented(t *testing.T) {
	srv, _ := natstest.StartServer(t)
	doc := liveSection(t)
	if !strings.Contains(doc, "$ fairctl policy") {
		t.Fatal("no fairctl policy command in docs/operations.md, Live policy")
	}
	var got strings.Builder
	last := 0
	for _, line := range strings.Split(doc, "\n") {
		cmd, ok := strings.CutPrefix(line, "$ ")
		if !ok {
			continue
		}
		got.WriteString(line + "\n")
		if cmd == "echo $?" {
			got.WriteString(strconv.Itoa(last) + "\n")
			continue
		}
		args := strings.Fields(cmd)
		if args[0] != "fairctl" {
			t.Fatalf("unexpected command %q", cmd)
		}
		args = append([]string{"--server", srv.ClientURL()}, args[1:]...)
		for i, a := range args {
			if strings.HasSuffix(a, ".yaml") {
				args[i] = filepath.Join("testdata", a)
			}
		}
		var out, errb bytes.Buffer
		last = run(context.Background(), args, &out, &errb)
		got.WriteString(strings.ReplaceAll(out.String()+errb.String(), "testdata/", ""))
	}
	if g, w := normalise(got.String()), normalise(doc); g != w {
		gl, wl := strings.Split(g, "\n"), strings.Split(w, "\n")
		for i := range max(len(gl), len(wl)) {
			var a, b string
			if i < len(gl) {
				a = gl[i]
			}
			if i < len(wl) {
				b = wl[i]
			}
			if a != b {
				t.Errorf("line %d of the transcript:\n got: %q\nwant: %q", i+1, a, b)
				break
			}
		}
		t.Logf("the transcript of this run:\n%s", got.String())
	}
}

func TestPolicyUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"policy"}, 2, "usage: fairctl policy"},
		{[]string{"policy", "nope"}, 2, `unknown subcommand "nope"`},
		{[]string{"policy", "put"}, 2, "takes 1 argument"},
		{[]string{"policy", "rollback", "x"}, 2, "REV must be a revision number"},
		{[]string{"policy", "put", "testdata/policy-invalid.yaml"}, 1, "policy_classes[0].quantum"},
	} {
		var out, errb bytes.Buffer
		if got := run(context.Background(), append([]string{"--server", "nats://127.0.0.1:1"}, tt.args...), &out, &errb); got != tt.code {
			t.Errorf("run(%q) = %d, want %d (stderr %q)", tt.args, got, tt.code, errb.String())
		}
		if !strings.Contains(errb.String(), tt.want) {
			t.Errorf("run(%q) stderr %q, want it to contain %q", tt.args, errb.String(), tt.want)
		}
	}
}
