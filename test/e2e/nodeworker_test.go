package e2e

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// The example worker in examples/node-worker, written in Node.js from
// docs/protocol.md alone, passes the same end-to-end test as the Go mock
// worker: N requests, each accepted once and acknowledged once (nothing
// redelivered, no completion twice), nothing refused or rejected, and the
// request stream empty at the end.

const nodeWorkerDir = "../../examples/node-worker"

// TestEndToEndGoMockWorker is the reference run, with the Go mock worker.
func TestEndToEndGoMockWorker(t *testing.T) {
	wsEndToEnd(t, "mock-1", true, func(t *testing.T, url string) {
		startMock(t, connect(t, url), mockworker.Config{ID: "mock-1"})
	})
}

// TestEndToEndNodeWorker is the same run with the Node worker, which asks for
// the compact dispatch form by default. It needs node and `npm ci` in
// examples/node-worker: without them it skips, but under CI (CI=true) it
// fails, so that CI never passes without running it.
func TestEndToEndNodeWorker(t *testing.T) {
	node := nodeOrSkip(t)
	wsEndToEnd(t, "node-1", true, func(t *testing.T, url string) {
		startNodeWorker(t, node, url, "node-1", "COMPLETION_RECORDS=1", "MAX_ACTIVE=8", "HOLD_MS=2")
	})
}

// TestEndToEndNodeWorkerHeaderForm is the same run with the Node worker
// asking for the header form (HEADER_FORM=1).
func TestEndToEndNodeWorkerHeaderForm(t *testing.T) {
	node := nodeOrSkip(t)
	wsEndToEnd(t, "node-h", false, func(t *testing.T, url string) {
		startNodeWorker(t, node, url, "node-h", "COMPLETION_RECORDS=1", "MAX_ACTIVE=8", "HOLD_MS=2", "HEADER_FORM=1")
	})
}

// TestNodeWorkerDecodesFrames: the Node worker's decodeFrame reads what
// wire.DecodeDispatch reads from the dispatcher's frames, and fails where it
// fails: every prefix of two frames (a cut inside the fields or the headers
// fails, one inside the body is a shorter body), another version, a dp rank
// above 65535; and it books what the dispatcher booked (Dispatch-Prefill-Tokens
// when the frame carries it, else the cost).
func TestNodeWorkerDecodesFrames(t *testing.T) {
	node := nodeOrSkip(t)
	frame := func(d wire.Dispatch, hdrs ...[]string) []byte {
		f := wire.AppendDispatchFields(nil, &d)
		for _, h := range hdrs {
			f = wire.AppendHeaderEntry(f, h[0], h[1:])
		}
		return append(wire.EndHeaders(f), "hello"...)
	}
	// The example of docs/protocol.md, Compact dispatch form, and one with
	// multi-byte varints, a header of two values and one of none.
	frames := [][]byte{
		frame(wire.Dispatch{RequestID: "r1", Class: "premium", DPRank: 1, Seq: 300, Cost: 512, QueuedMs: 4, Ack: "$JS.ACK.x", AckWaitMs: 30000},
			[]string{"Dispatch-Fairness-Key", "acme"}, []string{"Dispatch-Prefill-Tokens", "200"}),
		frame(wire.Dispatch{RequestID: "r2", DPRank: 65535, Seq: 1<<40 + 3, Cost: 1 << 33, QueuedMs: 128, Ack: "a", AckWaitMs: 1},
			[]string{"X-Two", "a", "b"}, []string{"x-none"}, []string{"Dispatch-Response-To", "resp.1"}),
	}
	var cases [][]byte
	for _, f := range frames {
		for n := 1; n <= len(f); n++ {
			cases = append(cases, f[:n])
		}
	}
	v2 := slices.Clone(frames[0])
	v2[0] = 2
	cases = append(cases, v2, frame(wire.Dispatch{RequestID: "r3", DPRank: 65536, Ack: "a"}))

	script := `const { decodeFrame, bookedPrefill } = require("./worker.js");
for (const hex of process.argv.slice(1)) {
  try {
    const d = decodeFrame(Buffer.from(hex, "hex"));
    console.log(JSON.stringify({ id: d.requestId, class: d.cls, rank: d.dpRank, seq: d.seq, cost: d.cost, queued: d.queuedMs,
      ack: d.ack, wait: d.ackWaitMs, key: d.header("dispatch-fairness-key"), two: d.header("x-two"),
      resp: d.header("DISPATCH-RESPONSE-TO"), booked: bookedPrefill(d), body: Buffer.from(d.body).toString() }));
  } catch (err) {
    console.log(JSON.stringify({ error: String(err) }));
  }
}`
	args := []string{"-e", script, "--"}
	for _, c := range cases {
		args = append(args, hex.EncodeToString(c))
	}
	cmd := exec.Command(node, args...)
	cmd.Dir = nodeWorkerDir
	cmd.Env = append(os.Environ(), "WORKER_ID=frames")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("node printed %d lines for %d frames:\n%s", len(lines), len(cases), out)
	}
	type decoded struct {
		ID, Class, Ack, Key, Two, Resp, Body, Error string
		Rank, Seq, Cost, Queued, Wait, Booked       uint64
	}
	first := func(h map[string][]string, name string) string {
		for k, v := range h {
			if strings.EqualFold(k, name) && len(v) > 0 {
				return v[0]
			}
		}
		return ""
	}
	for i, c := range cases {
		var got decoded
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("frame %d: %q: %v", i, lines[i], err)
		}
		var d wire.Dispatch
		h, body, err := wire.DecodeDispatch(c, &d)
		if err != nil {
			if got.Error == "" {
				t.Errorf("frame %x: Go fails (%v), node reads %+v", c, err, got)
			}
			continue
		}
		// What the dispatcher booked (docs/protocol.md, Which figure each
		// dispatch field is): Dispatch-Prefill-Tokens when sent, else the cost.
		booked := d.Cost
		if v, err := strconv.ParseUint(first(h, "Dispatch-Prefill-Tokens"), 10, 64); err == nil {
			booked = v
		}
		want := decoded{ID: d.RequestID, Class: d.Class, Ack: d.Ack, Key: first(h, "Dispatch-Fairness-Key"), Two: first(h, "X-Two"),
			Resp: first(h, "Dispatch-Response-To"), Body: string(body), Rank: uint64(d.DPRank), Seq: d.Seq, Cost: d.Cost, Queued: d.QueuedMs, Wait: d.AckWaitMs,
			Booked: booked}
		if got != want {
			t.Errorf("frame %x: node reads %+v, Go %+v", c, got, want)
		}
	}
}

// TestNodeWorkerStreams: the Node worker streams responses as
// docs/protocol.md, Responses says (claim, numbered chunks, end marker, then
// the acknowledgement), stops a request cancelled through the dispatcher
// (end marker cancelled, +TERM) and one whose producer went away.
func TestNodeWorkerStreams(t *testing.T) {
	node := nodeOrSkip(t)
	f := startFixture(t)
	ns, p, nc, js := f.ns, f.p, f.nc, f.js
	startNodeWorker(t, node, ns.URL(), "node-s", "MAX_ACTIVE=8", "CHUNKS=5", "CHUNK_MS=2")
	waitLive(t, p, "node-s")

	var prods []*rsProducer
	for i := range 5 {
		pr := rsFollow(t, nc, "node-"+strconv.Itoa(i))
		pr.publish(js, "default", map[string]string{wire.HeaderISLTokens: "10"})
		prods = append(prods, pr)
	}
	// Long ones: 100,000 chunks 2 ms apart, cancelled or left.
	cancelled, left := rsFollow(t, nc, "node-cancel"), rsFollow(t, nc, "node-left")
	cancelled.publish(js, "default", map[string]string{wire.HeaderISLTokens: "10", wire.HeaderOutputTokens: "100000"})
	left.publish(js, "default", map[string]string{wire.HeaderISLTokens: "10", wire.HeaderOutputTokens: "100000"})
	for _, pr := range prods {
		waitFor(t, 20*time.Second, pr.id+": its response", func() bool { _, end, broken, _, _ := pr.state(); return end != nil || broken != "" })
		chunks, end, broken, claims, _ := pr.state()
		if broken != "" || end == nil || end.Status != wire.EndOK || end.Chunks != 5 || chunks != 5 || claims != 1 {
			t.Errorf("%s: %d chunks, end %+v, broken %q, %d claims; want 5 chunks and an ok end, one claim", pr.id, chunks, end, broken, claims)
		}
	}
	<-cancelled.firstChunk
	<-left.firstChunk
	rsCancel(t, nc, "node-cancel")
	left.goAway()
	waitFor(t, 10*time.Second, "the cancelled response's end marker", func() bool { _, end, _, _, _ := cancelled.state(); return end != nil })
	if _, end, _, _, _ := cancelled.state(); end.Status != wire.EndCancelled {
		t.Errorf("cancelled request: end status %q, want cancelled", end.Status)
	}
	frlWaitMetric(t, p, "fairdispatch_cancels_total", `where="running"`, 1)
	waitFor(t, 10*time.Second, "the request stream to empty (the two stopped requests dropped)", func() bool {
		return streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
}

// nodeOrSkip returns the node binary for the example worker (nodeFor).
func nodeOrSkip(t *testing.T) string {
	t.Helper()
	return nodeFor(t, nodeWorkerDir, "examples/node-worker", "nats", "the Node example worker")
}

// nodeFor returns the node binary, skipping the test when node or module in
// dir's node_modules (dir is shown as name) is missing, except under CI
// (CI=true), where it fails; what names what cannot run.
func nodeFor(t *testing.T, dir, name, module, what string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not on PATH"
	default:
		if _, err := os.Stat(filepath.Join(dir, "node_modules", module, "package.json")); err != nil {
			missing = name + "/node_modules is missing: run `npm ci` in " + name
		}
	}
	if missing != "" {
		natstest.Missing(t, what+" cannot run: "+missing)
	}
	return node
}

// startNodeWorker runs examples/node-worker/worker.js as worker id and
// returns its output; at the end of the test it sends SIGTERM and requires a
// clean exit.
func startNodeWorker(t *testing.T, node, url, id string, env ...string) *natstest.Buffer {
	t.Helper()
	cmd := exec.Command(node, "worker.js")
	cmd.Dir = nodeWorkerDir
	cmd.Env = append(append(os.Environ(), "NATS_URL="+url, "WORKER_ID="+id), env...)
	out, done := startProcess(t, "node worker", cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // it drains, then exits 0
		select {
		case err := <-done:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Errorf("node worker: %v", err)
			} else if err != nil {
				t.Errorf("node worker exited with %v after SIGTERM, want 0", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("node worker did not stop within 10 s of SIGTERM")
		}
	})
	return out
}

// wsEndToEnd runs n requests against one worker started by start, which
// asks for the compact dispatch form if compact is set and for the header
// form if not.
func wsEndToEnd(t *testing.T, id string, compact bool, start func(t *testing.T, url string)) {
	const n = 200
	ns := startNATS(t)
	// The default class queues, so that a worker at its capacity makes
	// requests wait rather than fail.
	p := startDispatcher(t, ns.URL(), "--queue-threshold", "1")
	nc := connect(t, ns.URL())
	records := frlRecordDone(t, nc)
	start(t, ns.URL())
	waitLive(t, p, id)
	if v, ok := p.queues(); !ok || len(v.Workers) != 1 || (v.Workers[0].Compact != 0) != compact {
		t.Fatalf("/debug/queues workers %+v, want %s with compact_dispatch %v", v.Workers, id, compact)
	}

	res := runLoad(t, nc, defaultLoad("e2e-"+id, n))
	frlCheckAllOn(t, res, n, id)
	if res.Duplicates != 0 {
		t.Errorf("%d duplicate completion records, want 0", res.Duplicates)
	}
	// The records subscription may trail loadgen's by a little.
	waitFor(t, 10*time.Second, "a completion record of every request", func() bool {
		for _, c := range res.Completions {
			if len(records.workers(c.RequestID)) == 0 {
				return false
			}
		}
		return true
	})
	for _, c := range res.Completions {
		if ws := records.workers(c.RequestID); len(ws) != 1 {
			t.Errorf("request %s: %d completion records, want 1", c.RequestID, len(ws))
		}
	}
	frlWaitMetric(t, p, frlHandshakes, `outcome="accepted"`, n)
	if got := p.metric(frlHandshakes, `outcome="refused"`) + p.metric(frlHandshakes, `outcome="timeout"`); got != 0 {
		t.Errorf("%v handshakes refused or timed out, want 0", got)
	}
	if got := p.metric("fairdispatch_rejected_total"); got != 0 {
		t.Errorf("fairdispatch_rejected_total = %v, want 0", got)
	}
	js := jsOf(t, nc)
	waitFor(t, 10*time.Second, "the request stream to empty", func() bool { return streamMsgs(t, js, "DISPATCH_REQ") == 0 })
	if got := p.metric("fairdispatch_redelivered_messages_total"); got != 0 {
		t.Errorf("fairdispatch_redelivered_messages_total = %v, want 0 (each request acked once)", got)
	}
}
