package e2e

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"fairdispatch/internal/fakeengine"
)

// TestPermissionsEngineWorkerProgram: the engine worker program, given the
// example's worker user, password and inbox prefix on its command line and in
// its environment, serves a producer's chat stream under the example
// permissions, and its confirmed acknowledgements (answered on its own inbox)
// leave nothing in the request stream. A wrong password stops it at once with
// the server's reason instead of waiting out --connect-timeout.
func TestPermissionsEngineWorkerProgram(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "engineworker")
	if out, err := exec.Command("go", "build", "-o", bin, "fairdispatch/cmd/engineworker").CombinedOutput(); err != nil {
		t.Fatalf("build engineworker: %v\n%s", err, out)
	}
	n, p := permStart(t)
	engine, err := fakeengine.New(context.Background(), fakeengine.Config{MaxNumSeqs: 8, NumGPUBlocks: 400, DecodePerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(engine.Handler())
	t.Cleanup(func() { srv.Close(); engine.Close() })
	args := []string{"--nats-url", n.URL(), "--nats-user", "worker_w1", "--connect-timeout", "1m",
		"--id", "w1", "--engine-url", srv.URL, "--max-num-seqs", "8", "--ttl", "3s"}

	wrong := exec.Command(bin, args...)
	wrong.Env = append(wrong.Environ(), "ENGINEWORKER_NATS_PASSWORD=wrong")
	wrongOut, wrongDone := startProcess(t, "engineworker with a wrong password", wrong)
	if err := waitExit(t, wrongDone, 30*time.Second, "engineworker with a wrong password"); err == nil ||
		!containsAll(wrongOut.String(), "Authorization Violation") {
		t.Fatalf("with a wrong password: %v\n%s\nwant a non-zero exit naming the authorization violation", err, wrongOut)
	}

	w := exec.Command(bin, append(args, "--nats-inbox-prefix", "_INBOX_worker_w1")...)
	w.Env = append(w.Environ(), "ENGINEWORKER_NATS_PASSWORD="+permW1Secret)
	wOut, wDone := startProcess(t, "engineworker", w)
	waitFor(t, 30*time.Second, "w1 live", func() bool {
		select {
		case err := <-wDone:
			t.Fatalf("engineworker exited: %v\n%s", err, wOut)
		default:
		}
		return p.metric("fairdispatch_live_workers") == 1
	})

	premium, errs := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	c := newRespCaller(t, premium)
	c.resp = "_RESP.producer_premium."
	msgs := []fakeengine.Message{{Role: "user", Content: "hello under permissions"}}
	call := c.start("perm-ew-1", "premium", chatHeader("", msgs), chatRequest(msgs, 5, true, false))
	if err := call.wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	end, chunks, broken := call.result()
	got, err := content(chunks)
	if broken != "" || end == nil || end.Status != "ok" || err != nil || got != expectedContent(5) {
		t.Fatalf("response: end %+v, broken %q, content %q (%v); want ok and %q", end, broken, got, err, expectedContent(5))
	}
	js := jsOf(t, secConnectAs(t, n.URL(), "dispatcher", permDispatcherSecret))
	waitFor(t, 20*time.Second, "the request acknowledged by its worker", func() bool {
		return streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	if s := errs.String(); s != "" {
		t.Errorf("the producer got asynchronous errors:\n%s", s)
	}
}

// TestPermissionsNodeWorker: the Node example, given the example's worker
// user, password and inbox prefix in its environment (NATS_USER,
// NATS_PASSWORD, NATS_INBOX_PREFIX), streams a response under the example
// permissions, and its confirmed acknowledgements, answered on its own
// inbox, leave nothing in the request stream.
func TestPermissionsNodeWorker(t *testing.T) {
	node := nodeOrSkip(t)
	n, p := permStart(t)
	startNodeWorker(t, node, n.URL(), "w1", "NATS_USER=worker_w1", "NATS_PASSWORD="+permW1Secret,
		"NATS_INBOX_PREFIX=_INBOX_worker_w1", "CHUNKS=3", "CHUNK_MS=1")
	waitFor(t, 30*time.Second, "w1 live", func() bool { return p.metric("fairdispatch_live_workers") == 1 })

	premium, errs := secConnect(t, n.URL(), "producer_premium", permPremiumSecret, "_INBOX_producer_premium")
	c := newRespCaller(t, premium)
	c.resp = "_RESP.producer_premium."
	call := c.start("perm-node-1", "premium", nil, []byte("hello"))
	if err := call.wait(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	end, chunks, broken := call.result()
	if broken != "" || end == nil || end.Status != "ok" || len(chunks) != 3 {
		t.Fatalf("response: end %+v, broken %q, %d chunks; want ok and 3 chunks", end, broken, len(chunks))
	}
	js := jsOf(t, secConnectAs(t, n.URL(), "dispatcher", permDispatcherSecret))
	waitFor(t, 20*time.Second, "the request acknowledged by its worker", func() bool {
		return streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	if s := errs.String(); s != "" {
		t.Errorf("the producer got asynchronous errors:\n%s", s)
	}
}
