package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/configs/livepolicy"
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
	srv, nc := natstest.StartServer(t)
	openPolicyBucket(t, nc, "fairdispatch_policy") // as a dispatcher of the pool does at start
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

// openPolicyBucket creates the policy bucket as a dispatcher does at start.
func openPolicyBucket(t *testing.T, nc *nats.Conn, bucket string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := livepolicy.Open(context.Background(), js, bucket, livepolicy.BucketConfig{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyNeedsTheDispatchersBucket: fairctl policy creates no bucket (it
// would have neither the pool's replicas nor its storage, and a mistyped
// prefix would leave one behind): without one it says whose it is and who
// makes it.
func TestPolicyNeedsTheDispatchersBucket(t *testing.T) {
	srv, nc := natstest.StartServer(t)
	for _, args := range [][]string{{"policy", "get"}, {"policy", "put", "testdata/policy-weighted.yaml"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"--server", srv.ClientURL(), "--subject-prefix", "qwenn"}, args...), &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "policy bucket fairdispatch_qwenn_policy: not found") ||
			!strings.Contains(errb.String(), "check --subject-prefix") {
			t.Errorf("%v without the bucket: exit %d, %q; want 1 naming the bucket and who creates it", args, code, errb.String())
		}
	}
	js, _ := jetstream.New(nc)
	if _, err := js.KeyValue(context.Background(), "fairdispatch_qwenn_policy"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("after fairctl policy: the bucket lookup gave %v, want it still not found", err)
	}
	openPolicyBucket(t, nc, "fairdispatch_qwenn_policy")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--server", srv.ClientURL(), "--subject-prefix", "qwenn", "policy", "get"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "policy bucket fairdispatch_qwenn_policy: no policy in the bucket") {
		t.Errorf("get on an empty bucket: exit %d, %q; want 1 naming the bucket", code, errb.String())
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

// TestPolicyGetPrintsWhatRuns: after a revision put by a client that does
// not validate, get prints the revision the dispatchers run (the last good
// one), and says on stderr which one they refuse; diff compares with it.
func TestPolicyGetPrintsWhatRuns(t *testing.T) {
	srv, nc := natstest.StartServer(t)
	openPolicyBucket(t, nc, "fairdispatch_policy")
	fairctl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"--server", srv.ClientURL()}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errs := fairctl("policy", "put", "testdata/policy-weighted.yaml"); code != 0 {
		t.Fatalf("put: %d %s", code, errs)
	}
	js, _ := jetstream.New(nc)
	kv, _ := js.KeyValue(context.Background(), "fairdispatch_policy")
	if _, err := kv.Put(context.Background(), livepolicy.Key, []byte("default_policy_family: nope\n")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := fairctl("policy", "get")
	if code != 0 || !strings.Contains(out, "name: premium") || strings.Contains(out, "nope") ||
		!strings.Contains(errs, "revision 2, the bucket's current, is invalid and refused by every dispatcher") || !strings.Contains(errs, "revision 1 runs") {
		t.Fatalf("get after an invalid revision: exit %d\nstdout %s\nstderr %s\nwant revision 1's YAML, and revision 2 named as refused", code, out, errs)
	}
	// diff compares with what runs: the file that runs changes nothing.
	code, out, errs = fairctl("policy", "diff", "testdata/policy-weighted.yaml")
	if code != 0 || !strings.Contains(out, "from revision 1, which runs (revision 2, the bucket's current, is refused") || !strings.Contains(out, "no change") {
		t.Fatalf("diff of the running file after an invalid revision: exit %d\nstdout %s\nstderr %s\nwant no change against revision 1", code, out, errs)
	}
	// A delete of the key is refused the same way.
	if err := kv.Delete(context.Background(), livepolicy.Key); err != nil {
		t.Fatal(err)
	}
	code, out, errs = fairctl("policy", "get")
	if code != 0 || !strings.Contains(out, "name: premium") || !strings.Contains(errs, "revision 3 deletes the policy") || !strings.Contains(errs, "revision 1 runs") {
		t.Fatalf("get after a delete: exit %d\nstdout %s\nstderr %s\nwant revision 1's YAML, and the delete named as refused", code, out, errs)
	}
	if code, out, errs = fairctl("policy", "diff", "testdata/policy-weighted.yaml"); code != 0 || !strings.Contains(out, "no change") {
		t.Fatalf("diff of the running file after a delete: exit %d\nstdout %s\nstderr %s\nwant no change against revision 1", code, out, errs)
	}
}

// TestPolicyNamesARefusedInbox: a user whose permissions admit only its own
// inbox prefix, running fairctl without --inbox-prefix, is told what the
// server refused and which flag to give, not only that the deadline passed
// (JetStream's answers go to the default inbox, which it may not read).
func TestPolicyNamesARefusedInbox(t *testing.T) {
	s := natstest.Start(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "policy_admin", Password: "pw", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_policy_admin.>"}},
		}}}
	})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--server", s.URL(), "--user", "policy_admin", "--password", "pw",
		"--timeout", "2s", "policy", "get"}, &out, &errb)
	if code != 1 || !strings.Contains(strings.ToLower(errb.String()), "permissions violation for subscription to \"_inbox.") ||
		!strings.Contains(errb.String(), "--inbox-prefix") {
		t.Errorf("exit %d, %q; want 1 naming the refused subscription and --inbox-prefix", code, errb.String())
	}
}
