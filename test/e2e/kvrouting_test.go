package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
	"fairdispatch/wire"
)

// kvFleet is what one run of the shared-prefix workload observed.
type kvFleet struct {
	hitRate  float64        // the fleet's cached prompt tokens / prompt tokens, from the mock workers
	requests map[string]int // requests accepted per worker
	total    int
}

// kvFleetRequests is the size of the workload of TestKVRoutingHitRate.
const kvFleetRequests = 900

// runKVFleet runs issue 11's acceptance 2 workload once: three mock workers
// with LRU prefix caches of 100 device blocks, and 900 requests at 100 per
// second, each one of 50 shared prefixes (Zipf, s = 1.1) of 2 to 64 blocks
// plus 4 blocks of its own (the prefixes total about 1,650 blocks, the
// fleet's caches 300). A request takes 20 ms plus its uncached prefill
// (12,800 tokens per second: about 85 ms for 68 uncached blocks), so a few
// run on each worker at once and load matters. The dispatcher runs with
// --overlap-score-credit 2 and, when kvIndex, --kv-index; without the index
// the hashes reach the workers (which need them to simulate their caches)
// but the dispatcher routes by load alone, as without hashes.
func runKVFleet(t *testing.T, kvIndex bool, extra ...string) kvFleet {
	t.Helper()
	ns := startNATS(t)
	nc := connect(t, ns.URL())
	args := append([]string{"--leader-election=false", "--overlap-score-credit", "2"}, extra...)
	if kvIndex {
		args = append(args, "--kv-index")
	}
	p := startDispatcher(t, ns.URL(), args...)
	var ws []*mockworker.Worker
	for i := range 3 {
		ws = append(ws, startMock(t, nc, mockworker.Config{
			ID: fmt.Sprint("w", i+1), KVCapacity: 100, MaxNumSeqs: 32,
			PrefillTokensPerSec: 12800, OutputTokens: 5, DecodePerToken: 5 * time.Millisecond,
		}))
	}
	waitFor(t, 30*time.Second, "three live workers", func() bool { return p.metric("fairdispatch_live_workers") == 3 })
	if kvIndex {
		// Each worker resynchronises its (empty) ranks at start: wait for
		// those events, so the index follows the workers from the first request.
		waitFor(t, 30*time.Second, "the workers' first KV events applied", func() bool {
			return p.metric("fairdispatch_kv_events_total", `result="applied"`) >= 3
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := loadgen.Run(ctx, nc, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: "default", Count: kvFleetRequests}},
		Rate:    100, Seed: 11,
		Prefixes: loadgen.Prefixes{N: 50, Zipf: 1.1, MinBlocks: 2, MaxBlocks: 64, SuffixBlocks: 4},
	}, zerolog.Nop())
	if err != nil {
		t.Fatalf("loadgen: %v", err)
	}
	if len(res.Completions) != kvFleetRequests {
		t.Fatalf("%d completions, want %d", len(res.Completions), kvFleetRequests)
	}
	f := kvFleet{requests: map[string]int{}}
	var cached, prompt uint64
	for i, w := range ws {
		cs := w.CacheStats()
		cached += cs.CachedTokens
		prompt += cs.PromptTokens
		f.requests[fmt.Sprint("w", i+1)] = int(cs.Requests)
		f.total += int(cs.Requests)
	}
	f.hitRate = float64(cached) / float64(prompt)
	if f.hitRate != res.CacheHitRate && f.total == kvFleetRequests {
		t.Fatalf("hit rate %.4f from the workers, %.4f from the completion records", f.hitRate, res.CacheHitRate)
	}
	if kvIndex {
		overlap := p.metric("fairdispatch_kv_overlap_blocks_total")
		blocks := p.metric("fairdispatch_kv_prompt_blocks_total")
		t.Logf("dispatch overlap: %v of %v prompt blocks (%.3f)", overlap, blocks, overlap/blocks)
	}
	return f
}

// TestKVRoutingHitRate is acceptance 2 of issue 11 end to end: with block
// hashes and the KV index the fleet's prefix cache hit rate, as the mock
// workers measure it, is at least 1.5 times that of the same run routed by
// load alone (--kv-index off, the negative control), and no worker gets
// more than 1.5 times its fair share of requests.
//
// Measured (docs/decisions.md, KV cache index): about 0.28 against 0.16,
// 1.60 to 1.92 times over twelve runs (six beside a CPU hog), shares within
// 1.09. With caches of 200
// blocks the ratio is 1.46 to 1.49; with the default --overlap-score-credit
// 1, 1.51 to 1.72 (100 blocks) and 1.28 to 1.32 (200 blocks): hence the
// recommended credit 2 with the index.
func TestKVRoutingHitRate(t *testing.T) {
	with := runKVFleet(t, true)
	without := runKVFleet(t, false)
	t.Logf("hit rate with the index %.3f (requests %v), without %.3f (requests %v), ratio %.2f",
		with.hitRate, with.requests, without.hitRate, without.requests, with.hitRate/without.hitRate)
	if with.hitRate < 1.5*without.hitRate {
		t.Fatalf("hit rate %.3f with the index, %.3f without: want at least 1.5 times", with.hitRate, without.hitRate)
	}
	for w, n := range with.requests {
		if share := float64(n) / (float64(with.total) / 3); share > 1.5 {
			t.Fatalf("%s got %d of %d requests, %.2f times its fair share: want at most 1.5", w, n, with.total, share)
		}
	}
}

// TestKVFreshOverlapAfterEviction is acceptance 3 of issue 11: a request
// queued while its best worker rank evicts the prefix is dispatched using the
// eviction. The test plays worker w1 with two ranks (its own load reports and
// KV events, so it decides when capacity frees, for both ranks at once):
// rank 0 holds a 64-block prompt, rank 1 its first 32 blocks, and rank 1
// reports 160 prefill tokens more than rank 0. With capacity free, a request
// with the prompt's hashes goes to rank 0 (its overlap outweighs the load).
// Then both ranks are full, the same prompt is queued, rank 0 evicts the
// prompt, and capacity frees: the request goes to rank 1, whose 32 blocks are
// now the best overlap. Scored with the overlap at arrival it would go to
// rank 0; without the index (the negative control, --kv-index off) load alone
// sends it to rank 0.
func TestKVFreshOverlapAfterEviction(t *testing.T) {
	if before, after := kvFreshRun(t, true); before != 0 || after != 1 {
		t.Fatalf("with the index: before the eviction rank %d (want 0, 64 blocks held), after it rank %d (want 1, the overlap computed at dispatch)", before, after)
	}
	if _, after := kvFreshRun(t, false); after != 0 {
		t.Fatalf("without the index the queued request went to rank %d, want 0 (the less loaded): the control cannot tell the index from load", after)
	}
}

// kvFreshRun runs TestKVFreshOverlapAfterEviction's scenario, with or
// without --kv-index, and returns the rank of the request before the
// eviction and of the queued one. --queue-threshold 1 makes the default
// class queue, so a request that finds both ranks full waits.
func kvFreshRun(t *testing.T, kvIndex bool) (before, after int) {
	f := newFixture(t)
	ns, nc, js := f.ns, f.nc, f.js
	args := []string{"--leader-election=false", "--queue-threshold", "1"}
	if kvIndex {
		args = append(args, "--kv-index")
	}
	p := startDispatcher(t, ns.URL(), args...)

	type dispatch struct {
		id, ack string
		rank    int
		seq     uint64
	}
	got := make(chan dispatch, 16)
	subscribe(t, nc, "dispatch.work.w1", func(m *nats.Msg) {
		var d dispatch
		d.id, d.ack = m.Header.Get("Dispatch-Request-Id"), m.Header.Get("Dispatch-Ack")
		d.rank, _ = strconv.Atoi(m.Header.Get("Dispatch-DP-Rank"))
		d.seq, _ = strconv.ParseUint(m.Header.Get("Dispatch-Seq"), 10, 64)
		_ = m.Respond(nil) // accept
		got <- d
	})
	report := func(active uint64, seen uint64) {
		t.Helper()
		one, batched := uint64(1), uint64(8192)
		id, two, ttl, zero := "w1", uint32(2), uint64(600_000), uint32(0)
		r := wire.LoadReport{WorkerID: &id, DPStart: &zero, DPSize: &two, MaxActive: &one, MaxBatched: &batched, TTLms: &ttl,
			Instance: "fresh-w1", SeenSeq: &seen, Ranks: []wire.RankLoad{
				{Rank: 0, ActiveRequests: active},
				{Rank: 1, ActiveRequests: active, ActivePrefillTokens: 160},
			}}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("dispatch.load.w1", b); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kvEvent := func(id uint64, rank int32, stored, removed []uint64) {
		t.Helper()
		ev := &wire.KVEvent{Instance: "fresh-w1", ID: id, Rank: rank}
		ev.Stored[wire.Device], ev.Removed[wire.Device] = stored, removed
		body, err := wire.EncodeKVEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "dispatch.kv.w1", body); err != nil {
			t.Fatal(err)
		}
	}
	prompt := wire.ChainHashes(nil, make([]uint32, 64*16), 16)
	send := func(id string) {
		t.Helper()
		publish(t, js, "dispatch.req.default", id,
			map[string]string{"Dispatch-ISL-Tokens": "1024", "Dispatch-Block-Hashes": wire.EncodeHashes(prompt)}, nil)
	}
	next := func(id string) dispatch {
		t.Helper()
		select {
		case d := <-got:
			if d.id != id {
				t.Fatalf("dispatched %s, want %s", d.id, id)
			}
			if err := nc.Publish(d.ack, []byte("+ACK")); err != nil {
				t.Fatal(err)
			}
			return d
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not dispatched within 30 s", id)
		}
		return dispatch{}
	}

	report(1, 0) // both ranks full
	waitFor(t, 30*time.Second, "w1 live", func() bool { return p.metric("fairdispatch_live_workers") == 1 })
	kvEvent(1, 0, prompt, nil)
	kvEvent(1, 1, prompt[:32], nil)
	if kvIndex {
		waitFor(t, 30*time.Second, "96 device blocks in the index", func() bool {
			return p.metric("fairdispatch_kv_index_blocks", `tier="device"`) == 96
		})
	}

	// Fresh state, no eviction: the longer prefix on rank 0 wins.
	report(0, 0)
	send("before")
	d := next("before")

	// Full again; the request waits in the queue.
	report(1, d.seq)
	waitFor(t, 30*time.Second, "the full load applied", func() bool {
		v, ok := p.queues()
		return ok && len(v.Workers) == 1 && len(v.Workers[0].Ranks) == 2 && v.Workers[0].Ranks[1].ReportedPrefill == 160 &&
			p.metric("fairdispatch_dispatched_total", `class="default"`) == 1
	})
	send("queued")
	waitFor(t, 30*time.Second, "the request queued", func() bool {
		return p.metric("fairdispatch_pending_requests", `class="default"`) == 1
	})
	select {
	case d := <-got:
		t.Fatalf("%s dispatched to rank %d while both ranks were full", d.id, d.rank)
	default:
	}
	// Rank 0 evicts the prompt while the request waits.
	kvEvent(2, 0, nil, prompt)
	if kvIndex {
		waitFor(t, 30*time.Second, "the eviction applied", func() bool {
			return p.metric("fairdispatch_kv_index_blocks", `tier="device"`) == 32
		})
	}
	report(0, d.seq)
	return d.rank, next("queued").rank
}
