package main

import (
	"bytes"
	"context"
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

// TestPolicyCommandsAsDocumented runs the fairctl policy commands pasted in
// docs/operations.md, Live policy, in order, against an embedded server, and
// requires the output pasted there (times aside). "$ echo $?" prints the
// last exit status. File names are those of testdata/.
func TestPolicyCommandsAsDocumented(t *testing.T) {
	srv, _ := natstest.StartServer(t)
	doc := strings.Join(consoleBlocks(opsSection(t, "Live policy")), "")
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
		checkRun(t, append([]string{"--server", "nats://127.0.0.1:1"}, tt.args...), tt.code, tt.want)
	}
}
