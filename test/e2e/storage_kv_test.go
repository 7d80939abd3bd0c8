package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// stoKVLoad runs n shared-prefix requests (Dispatch-Block-Hashes) at 100 a
// second and fails the test unless every one completes.
func stoKVLoad(t *testing.T, nc *nats.Conn, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := loadgen.Run(ctx, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "default", Count: n}}, Rate: 100, Seed: 25,
		Prefixes: loadgen.Prefixes{N: 8, Zipf: 1.1, MinBlocks: 4, MaxBlocks: 16, SuffixBlocks: 2},
	}, zerolog.Nop())
	if err != nil || len(res.Completions) != n {
		t.Fatalf("shared-prefix requests: %v, %d of %d completed", err, len(res.Completions), n)
	}
}

// TestStorageKVStreamFull is the acceptance for the KV cache event stream
// full: DISPATCH_KV at its own limit refusing writes (here an operator's
// discard new on a 4 KiB stream, full of other messages; the server's store
// full does the same, TestStorageServerStoreFull). Every KV cache event of
// the workers is refused (10077 "maximum bytes exceeded"), so the
// dispatcher's index stays empty and requests with block hashes are routed
// by load alone, as without --kv-index (the index credits no overlap to any
// dispatch), and all complete. The workers' helper resynchronises a rank
// whose event was refused, backing off from 100 ms to 5 s: its refused
// publishes stay within that schedule, however slow the machine (a helper
// without the back-off refused hundreds a second). Once the operator raises
// the limit, the next resynchronisation of each worker is stored, the index
// fills and routing credits cached prefixes again.
func TestStorageKVStreamFull(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	js := jsOf(t, nc)
	p := startDispatcher(t, ns.URL(), "--kv-index", "--overlap-score-credit", "2")
	stoSetLimits(t, js, "DISPATCH_KV", func(c *jetstream.StreamConfig) { c.MaxBytes, c.Discard = 4<<10, jetstream.DiscardNew })
	_, err := stoFill(t, js, "dispatch.kv.filler", "filler", nil, []byte("not a KV cache event, filling the stream"), 1000)
	stoRefusal(t, err, wire.JSErrCodeStoreFailed, wire.RefusalMaxBytes)

	started := time.Now()
	var ws []*mockworker.Worker
	for i := range 2 {
		ws = append(ws, startMock(t, nc, mockworker.Config{ID: fmt.Sprint("w", i+1), KVCapacity: 100, MaxNumSeqs: 8}))
	}
	waitFor(t, 30*time.Second, "both workers live, their first KV event refused", func() bool {
		return p.metric("fairdispatch_live_workers") == 2 && ws[0].Helper().KVStats().Failed > 0 && ws[1].Helper().KVStats().Failed > 0
	})
	stoKVLoad(t, nc, 150)
	if prompt, overlap, blocks := p.metric("fairdispatch_kv_prompt_blocks_total"), p.metric("fairdispatch_kv_overlap_blocks_total"),
		p.metric("fairdispatch_kv_index_blocks"); prompt == 0 || overlap != 0 || blocks != 0 {
		t.Fatalf("while the KV stream refuses: %v prompt blocks scored, %v credited as overlap, %v blocks indexed; want some, 0, 0 (routing by load)",
			prompt, overlap, blocks)
	}
	// The back-off: rounds at 0, 0.1, 0.3, 0.7, 1.5, 3.1 s, then every 5 s,
	// each refusing the worker's one resynchronisation and at most one batch
	// of the changes made while it ran.
	elapsed := time.Since(started)
	rounds := uint64(2)
	for wait, at := 100*time.Millisecond, 100*time.Millisecond; at <= elapsed; wait, at = min(2*wait, 5*time.Second), at+min(2*wait, 5*time.Second) {
		rounds++
	}
	for _, w := range ws {
		if st := w.Helper().KVStats(); st.Failed > 2*rounds {
			t.Fatalf("worker %+v: %d KV events refused in %v, want at most %d: the helper resynchronises without backing off", st, st.Failed, elapsed, 2*rounds)
		}
	}
	t.Logf("KV events refused in %v (at most %d): %d, %d", elapsed, 2*rounds, ws[0].Helper().KVStats().Failed, ws[1].Helper().KVStats().Failed)

	stoSetLimits(t, js, "DISPATCH_KV", func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 })
	waitFor(t, 30*time.Second, "the workers' resynchronisations stored and applied once the KV stream has room", func() bool {
		return p.metric("fairdispatch_kv_events_total", `result="applied"`) >= 2 && p.metric("fairdispatch_kv_index_blocks") > 0
	})
	stoKVLoad(t, nc, 150)
	if overlap := p.metric("fairdispatch_kv_overlap_blocks_total"); overlap == 0 {
		t.Fatalf("after the KV stream has room again no dispatch was credited a cached prefix")
	}
	for _, w := range ws {
		t.Logf("%+v", w.Helper().KVStats())
	}
}
