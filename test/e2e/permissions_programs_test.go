package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fairdispatch/internal/fakeengine"
)

// TestPermissionsEnginePrograms: the engine worker program, given the
// example's worker user, password and inbox prefix on its command line and in
// its environment, serves a producer's chat stream under the example
// permissions, and its confirmed acknowledgements (answered on its own inbox)
// leave nothing in the request stream. A wrong password stops it at once with
// the server's reason instead of waiting out --connect-timeout. Then the
// gateway program, run as the example's gateway user with its inbox and
// response prefixes, finds the pool ready (its health check reads only what
// the example grants it) and answers OpenAI calls, streaming and not, through
// that engine worker, with no permission refused to anyone.
func TestPermissionsEnginePrograms(t *testing.T) {
	bins := buildPrograms(t, t.TempDir(), "engineworker", "gateway")
	bin := bins["engineworker"]
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

	gwConf := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := gwConfig(gwOptions{modelExtra: "    engine_model: fake-model\n", tenants: []gwTenant{{name: "acme", classes: "[premium]"}}})
	if err := os.WriteFile(gwConf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen, admin := freeAddr(t), freeAddr(t)
	gw := exec.Command(bins["gateway"], "--config", gwConf, "--listen", listen, "--admin-addr", admin, "--nats-url", n.URL(),
		"--nats-user", "gateway", "--nats-inbox-prefix", "_INBOX_gateway", "--response-prefix", "_RESP.gateway")
	gw.Env = append(gw.Environ(), "GATEWAY_NATS_PASSWORD="+permGatewaySecret)
	gwOut, gwDone := startProcess(t, "gateway", gw)
	base := "http://" + listen
	waitFor(t, 30*time.Second, "the gateway ready", func() bool {
		select {
		case err := <-gwDone:
			t.Fatalf("gateway exited: %v\n%s", err, gwOut)
		default:
		}
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello through the gateway"}],"max_tokens":5,"stream":%t}`, gwModel, stream)
		resp, got := gwPost(t, base, "/v1/chat/completions", "sk-acme", body)
		// The fake engine's tokens, whole in the message or one a chunk.
		want := `"content":" tok0 tok1 tok2 tok3 tok4"`
		if stream {
			want = `"content":" tok4"`
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(got, want) {
			t.Fatalf("stream %t: %d %s\nwant 200 with %s\ngateway:\n%s", stream, resp.StatusCode, got, want, tail(gwOut.String(), 15))
		}
	}
	waitFor(t, 20*time.Second, "the gateway's requests acknowledged", func() bool {
		return streamMsgs(t, js, "DISPATCH_REQ") == 0
	})
	// Without leader election the health check reads the durable consumer
	// instead of the lease (gateway.Health); the user may.
	gwc, gwErrs := secConnect(t, n.URL(), "gateway", permGatewaySecret, "_INBOX_gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := jsOf(t, gwc).Stream(ctx, "DISPATCH_REQ"); err != nil {
		t.Fatalf("the gateway user's stream info: %v", err)
	} else if _, err := st.Consumer(ctx, "dispatcher"); err != nil {
		t.Fatalf("the gateway user's consumer info: %v", err)
	}
	// The gateway user has no more than its part: not the dispatcher's inbox.
	if _, err := gwc.SubscribeSync("_INBOX.>"); err != nil {
		t.Fatal(err)
	}
	_ = gwc.Flush()
	waitFor(t, 5*time.Second, "the refusal of the dispatcher's inbox", func() bool {
		return gwErrs.has(`Subscription to "_INBOX.>"`)
	})
	for name, out := range map[string]string{"gateway": gwOut.String(), "engineworker": wOut.String(), "dispatcher": p.out.String()} {
		if strings.Contains(out, "Permissions Violation") {
			t.Errorf("%s was refused a permission:\n%s", name, out)
		}
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
