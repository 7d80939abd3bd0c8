package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// TestStorageServerStoreFull is the acceptance for the whole JetStream store
// full: the dispatcher's embedded server capped at 128 KiB
// (--nats-max-file-store), filled by requests in DISPATCH_REQ, which has no
// limit of its own, while no worker is live. Every write is then refused,
// whatever the stream, with 10023 "insufficient resources": a producer's
// next publish, and a policy put (fairctl policy put fails and says why; the
// running policy stays). The leader's lease lives in a memory bucket, so its
// renewals are stored while the file store is full and it keeps leading; the
// gauges show the server's store at its limit. Once workers start, the
// dispatcher dispatches what fills the store, every request completes and
// the store drains; then a policy put is stored and applied and new
// requests complete. fairctl's error is the one docs/operations.md, When
// storage runs out, shows. Before the fix the lease bucket was file-backed: its
// renewals were refused, the leader stepped down and nobody could take the
// lease while the store stayed full, so nothing was dispatched to drain it.
func TestStorageServerStoreFull(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	const maxStore = 128 << 10
	addr := freeAddr(t)
	url := "nats://" + addr
	p := startDispatcher(t, "", "--nats-listen", addr, "--data-dir", t.TempDir(), "--nats-max-file-store", fmt.Sprint(maxStore),
		"--policy-config", policyFile(t, "one-class", "quantum", 512))
	nc := connect(t, url)
	js := jsOf(t, nc)
	tr := stoTrack(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lease, err := js.KeyValue(ctx, "fairdispatch_leader")
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		e, err := lease.Get(ctx, "dispatcher")
		if err != nil {
			return 0
		}
		return e.Revision()
	}

	hdr := map[string]string{wire.HeaderISLTokens: "512", wire.HeaderReplyTo: tr.inbox}
	body := []byte(strings.Repeat("b", 200))
	fill, err := stoFill(t, js, "dispatch.req.default", "fill", hdr, body, 5000)
	stoRefusal(t, err, wire.JSErrCodeInsufficientResources, wire.RefusalInsufficientResources)
	t.Logf("%d requests fill the store", len(fill))

	// Nothing is acknowledged without a worker: the store stays full while
	// the lease is renewed four times.
	r0 := revision()
	waitFor(t, 20*time.Second, "four lease renewals stored while the store is full", func() bool { return revision() >= r0+4 })
	_, err = tryPublish(js, "dispatch.req.default", "probe", hdr, body)
	stoRefusal(t, err, wire.JSErrCodeInsufficientResources, wire.RefusalInsufficientResources)
	if lead, failed := p.metric("fairdispatch_leader"), p.metric("fairdispatch_lease_renewal_failures_total"); lead != 1 || failed != 0 {
		t.Fatalf("while the store is full: fairdispatch_leader %v, lease renewal failures %v; want 1, 0", lead, failed)
	}
	waitFor(t, 10*time.Second, "the store gauges at the limit", func() bool {
		return p.metric("fairdispatch_jetstream_server_max_bytes", `storage="file"`) == maxStore &&
			p.metric("fairdispatch_jetstream_server_bytes", `storage="file"`) >= 0.9*maxStore &&
			p.metric("fairdispatch_jetstream_account_bytes", `storage="file"`) >= 0.9*maxStore &&
			p.metric("fairdispatch_stream_bytes", `stream="DISPATCH_REQ"`) > 0
	})
	newPolicy := policyFile(t, "one-class", "quantum", 256)
	out, err := exec.Command(fairctl(t), "--server", url, "policy", "put", newPolicy).CombinedOutput()
	if err == nil || !strings.Contains(string(out), wire.RefusalInsufficientResources) || !strings.Contains(string(out), "store is full") {
		t.Fatalf("fairctl policy put into a full store: %v\n%s\nwant a failure saying the store is full (insufficient resources)", err, out)
	}
	last := strings.TrimSpace(string(out[strings.LastIndex(string(out[:len(out)-1]), "\n")+1:]))
	if doc, err := os.ReadFile("../../docs/operations.md"); err != nil || !strings.Contains(string(doc), "\n"+last+"\n") {
		t.Errorf("docs/operations.md, When storage runs out, does not show fairctl's error as it is now (%v):\n%s", err, last)
	}

	for i := range 2 {
		startMock(t, nc, mockworker.Config{ID: fmt.Sprint("w", i+1), MaxNumSeqs: 4})
	}
	waitFor(t, time.Minute, "every request that filled the store completed", func() bool { return len(tr.missing(fill)) == 0 })
	waitFor(t, 30*time.Second, "the request stream empty", func() bool { return stoStreamInfo(t, js, "DISPATCH_REQ").Msgs == 0 })

	runFairctl(t, "--server", url, "policy", "put", newPolicy)
	waitFor(t, 10*time.Second, "the new policy applied", func() bool { return p.metric("fairdispatch_policy_revision") == 2 })
	res, err := loadgen.Run(ctx, nc, loadgen.Config{Classes: []loadgen.ClassCount{{Class: "default", Count: 100}}, ISL: 512}, zerolog.Nop())
	if err != nil || len(res.Completions) != 100 {
		t.Fatalf("requests after the drain: %v, %d of 100 completed", err, len(res.Completions))
	}
	if lead, failed := p.metric("fairdispatch_leader"), p.metric("fairdispatch_lease_renewal_failures_total"); lead != 1 || failed != 0 ||
		strings.Contains(p.out.String(), "lease lost") {
		t.Fatalf("fairdispatch_leader %v, lease renewal failures %v, or the log says the lease was lost: want 1, 0, never", lead, failed)
	}
	t.Logf("%d of the fill ran twice", tr.duplicates(fill))
}
