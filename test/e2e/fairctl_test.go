package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/mockworker"
)

// runFairctl runs fairctl with args to the end and returns its stdout; it fails
// the test on a non-zero exit.
func runFairctl(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(fairctl(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("fairctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, tail(out.String(), 20), tail(errb.String(), 20))
	}
	return out.String()
}

// replayCount is the number of dead letters TestFairctlDLQReplay makes and
// replays: the figure of issue 12's acceptance.
const replayCount = 10000

// TestFairctlDLQReplay: requests rejected queue_full by a zero limit fill the
// DLQ; after the limit is raised (fairctl policy put) and a restart, fairctl dlq replay --yes
// dispatches every one exactly once, even when the first replay is killed
// (SIGKILL) mid-way and run again, and a replay of the emptied DLQ does
// nothing (docs/operations.md, Dead letters).
func TestFairctlDLQReplay(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	f, busy := startBusy(t, "dlq-zero")
	ns, nc, js, p := f.ns, f.nc, f.js, f.p

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var futures []jetstream.PubAckFuture
	for i := range replayCount {
		m := nats.NewMsg("dispatch.req.limited")
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("r-%d", i))
		m.Header.Set("Dispatch-ISL-Tokens", "10")
		m.Header.Set("X-Test-Id", fmt.Sprintf("t-%d", i))
		m.Data = fmt.Appendf(nil, "body %d", i)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
		if (i+1)%500 == 0 { // a window, so that the publisher never stalls
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publish acks did not come")
			}
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("publish acks did not come")
		}
	}
	waitFor(t, 60*time.Second, "every request dead-lettered", func() bool {
		return streamMsgs(t, js, "DISPATCH_DLQ") == replayCount && streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	var ls []struct {
		Seq       uint64 `json:"stream_seq"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
		Subject   string `json:"subject"`
	}
	if err := json.Unmarshal([]byte(runFairctl(t, "--server", ns.URL(), "--json", "dlq", "ls", "--error", "queue_full")), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls) != replayCount || ls[0].Subject != "dispatch.req.limited" {
		t.Fatalf("dlq ls --error queue_full: %d letters (first %+v), want %d from dispatch.req.limited", len(ls), ls[0], replayCount)
	}

	// The limit raised: a new dispatcher, the busy worker gone, a real one.
	p.kill()
	busy.close()
	// Each test id must be dispatched under one request id: the replay's
	// (a handshake the dispatcher retries sends the same id again).
	var mu sync.Mutex
	dispatches := map[string]map[string]bool{}
	sends := 0
	if _, err := nc.Subscribe("dispatch.work.>", func(m *nats.Msg) {
		mu.Lock()
		sends++
		h := dispatchHeader(t, m)
		id := h.Get("X-Test-Id")
		if dispatches[id] == nil {
			dispatches[id] = map[string]bool{}
		}
		dispatches[id][h.Get("Dispatch-Request-Id")] = true
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The limit is raised in the policy bucket (docs/operations.md, Live
	// policy): the bucket's policy runs, not the file a dispatcher restarts with.
	raised := policyFile(t, "dlq-raised")
	runFairctl(t, "--server", ns.URL(), "policy", "put", raised)
	p = startDispatcher(t, ns.URL(), "--policy-config", raised)
	lpWaitRevision(t, 2, p)
	startMock(t, nc, mockworker.Config{ID: "w1", DPSize: 2, TotalKVBlocks: 1 << 16, MaxNumSeqs: 64, PrefillTokensPerSec: 1e7})
	waitLive(t, p, "w1")

	out := runFairctl(t, "--server", ns.URL(), "dlq", "replay")
	if !strings.Contains(out, fmt.Sprintf("dry run: %d dead letters would be replayed, 0 skipped", replayCount)) {
		t.Fatalf("dry run: %s", tail(out, 3))
	}
	if n := streamMsgs(t, js, "DISPATCH_DLQ"); n != replayCount {
		t.Fatalf("after the dry run the DLQ holds %d, want %d", n, replayCount)
	}

	// A replay killed after republishing the last dead letter and before
	// deleting it: its republished copy is already in the request stream.
	lastL := ls[len(ls)-1]
	crashed := nats.NewMsg("dispatch.req.limited")
	crashed.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("replay:%d:%s", lastL.Seq, lastL.RequestID))
	crashed.Header.Set("Dispatch-ISL-Tokens", "10")
	crashed.Header.Set("X-Test-Id", "t-"+strings.TrimPrefix(lastL.RequestID, "r-"))
	if _, err := js.PublishMsg(ctx, crashed); err != nil {
		t.Fatal(err)
	}

	// The first replay, paced so that it is still running when killed.
	var errb bytes.Buffer
	cmd := exec.Command(fairctl(t), "--server", ns.URL(), "dlq", "replay", "--yes", "--rate", "1000")
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitFor(t, 30*time.Second, "the first replay a tenth of the way", func() bool {
		return streamMsgs(t, js, "DISPATCH_DLQ") <= replayCount*9/10
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	if err := <-exited; err == nil {
		t.Fatal("the first replay ended before it was killed")
	}
	left := streamMsgs(t, js, "DISPATCH_DLQ")
	if left == 0 {
		t.Fatal("the first replay emptied the DLQ before it was killed")
	}
	t.Logf("killed the first replay with %d dead letters left", left)

	out = runFairctl(t, "--server", ns.URL(), "dlq", "replay", "--yes")
	// The planted copy is a duplicate; so is the letter the kill may have
	// caught between its republish and its deletion.
	var replayed, dupes int
	if _, err := fmt.Sscanf(out, "replayed %d dead letters (%d already republished", &replayed, &dupes); err != nil ||
		replayed != int(left) || dupes < 1 || dupes > 2 {
		t.Errorf("second replay: %s; want %d replayed, 1 or 2 of them already republished", strings.TrimSpace(out), left)
	}
	waitFor(t, 90*time.Second, "every replayed request done", func() bool {
		mu.Lock()
		n := len(dispatches)
		mu.Unlock()
		return n == replayCount && streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	if n := streamMsgs(t, js, "DISPATCH_DLQ"); n != 0 {
		t.Errorf("DLQ holds %d dead letters after the replays, want 0", n)
	}
	out = runFairctl(t, "--server", ns.URL(), "dlq", "replay", "--yes")
	if !strings.Contains(out, "replayed 0 dead letters") {
		t.Errorf("replay of an empty DLQ: %s", strings.TrimSpace(out))
	}
	if n := streamMsgs(t, js, "DISPATCH_REQ"); n != 0 {
		t.Errorf("replay of an empty DLQ published %d requests", n)
	}
	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for i := range replayCount {
		if ids := dispatches[fmt.Sprintf("t-%d", i)]; len(ids) != 1 {
			if bad++; bad <= 10 {
				t.Errorf("request t-%d dispatched as %d requests %v, want 1", i, len(ids), ids)
			}
		}
	}
	t.Logf("%d sends to workers for %d requests", sends, replayCount)
	if len(dispatches) != replayCount {
		t.Errorf("%d distinct requests dispatched, want %d", len(dispatches), replayCount)
	}
	if t.Failed() {
		t.Logf("first replay's stderr:\n%s", tail(errb.String(), 10))
	}
}

// TestFairctlDLQFiltersAndPurge: the --class, --error and --since filters
// select the right letters, and purge deletes only those, with --yes only.
func TestFairctlDLQFiltersAndPurge(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	f, _ := startBusy(t, "dlq-zero")
	ns, js := f.ns, f.js
	for i := range 3 {
		publish(t, js, "dispatch.req.limited", fmt.Sprintf("qf-%d", i), map[string]string{"Dispatch-ISL-Tokens": "10"}, nil)
	}
	for i := range 2 {
		publish(t, js, "dispatch.req.odd", fmt.Sprintf("bad-%d", i), map[string]string{"Dispatch-ISL-Tokens": "abc"}, nil)
	}
	waitFor(t, 20*time.Second, "5 dead letters", func() bool { return streamMsgs(t, js, "DISPATCH_DLQ") == 5 })
	count := func(args ...string) int {
		var ls []json.RawMessage
		out := runFairctl(t, append([]string{"--server", ns.URL(), "--json", "dlq", "ls"}, args...)...)
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatalf("dlq ls %v: %v: %s", args, err, out)
		}
		return len(ls)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 5},
		{[]string{"--class", "limited"}, 3},
		{[]string{"--class", "odd"}, 2},
		{[]string{"--error", "bad_request"}, 2},
		{[]string{"--class", "limited", "--error", "bad_request"}, 0},
		{[]string{"--since", "1h"}, 5},
		{[]string{"--since", future}, 0},
	} {
		if got := count(c.args...); got != c.want {
			t.Errorf("dlq ls %v: %d letters, want %d", c.args, got, c.want)
		}
	}
	out := runFairctl(t, "--server", ns.URL(), "dlq", "purge", "--error", "bad_request")
	if !strings.Contains(out, "dry run: 2 dead letters would be deleted") || streamMsgs(t, js, "DISPATCH_DLQ") != 5 {
		t.Fatalf("purge without --yes: %q, DLQ %d; want a dry run of 2 and 5 kept", out, streamMsgs(t, js, "DISPATCH_DLQ"))
	}
	out = runFairctl(t, "--server", ns.URL(), "dlq", "purge", "--error", "bad_request", "--yes")
	if !strings.Contains(out, "deleted 2 dead letters") {
		t.Errorf("purge --yes: %q", out)
	}
	if got, left := count("--class", "limited"), streamMsgs(t, js, "DISPATCH_DLQ"); got != 3 || left != 3 {
		t.Errorf("after the purge: %d limited letters, %d in the DLQ; want 3 and 3", got, left)
	}
}
