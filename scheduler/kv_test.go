package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/kvindex"
	"fairdispatch/request"
	"fairdispatch/wire"
)

// kvFixture is a fixture whose scheduler scores with a KV cache index.
func kvFixture(t *testing.T) (*fixture, *kvindex.Index) {
	t.Helper()
	pol, err := configs.Parse("test.yaml", []byte(twoClasses))
	if err != nil {
		t.Fatal(err)
	}
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(7, 7)), KV: x}, t0)
	return &fixture{t: t, s: s, now: t0}, x
}

// kvApply applies an event of instance "a" to the index, failing the test on error.
func kvApply(t *testing.T, x *kvindex.Index, w string, id uint64, stored, removed []uint64) {
	t.Helper()
	ev := &wire.KVEvent{Instance: "a", ID: id}
	ev.Stored[wire.Device], ev.Removed[wire.Device] = stored, removed
	if r, err := x.Apply(w, ev); err != nil || r.Gap {
		t.Fatalf("Apply: %+v, %v", r, err)
	}
}

// TestKVOverlapAtAdmission: with block hashes, admission's cached tokens are
// the best weighted overlap of an eligible rank times the block size, and they
// replace Dispatch-Worker-Overlap and Dispatch-Cached-Tokens.
func TestKVOverlapAtAdmission(t *testing.T) {
	f, x := kvFixture(t)
	prompt := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	f.report("w1", 5000)
	f.report("w2", 5000)
	kvApply(t, x, "w1", 1, prompt[:6], nil)
	kvApply(t, x, "gone", 1, prompt, nil) // not a live worker: not eligible
	d := f.arrive("premium", 400, func(a *request.Arrival) {
		a.Hashes = prompt
		a.Cached = 300
	})
	if d.Req.Cached != 6*16 {
		t.Fatalf("cached = %d, want %d (6 blocks of 16 tokens)", d.Req.Cached, 6*16)
	}
	d = f.arrive("premium", 400, func(a *request.Arrival) { a.Hashes = []uint64{9}; a.Cached = 300 })
	if d.Req.Cached != 0 {
		t.Fatalf("cached with no overlap = %d, want 0 (the hashes replace Dispatch-Cached-Tokens)", d.Req.Cached)
	}
}

// TestKVFreshOverlapAtDispatch is acceptance 3 of issue 11 at the core: a
// request queued while its best worker evicts the prefix (and another stores
// it) is dispatched using the eviction. w1 is a little less loaded, so
// without the fresh overlap the request would go to w1.
func TestKVFreshOverlapAtDispatch(t *testing.T) {
	f, x := kvFixture(t)
	prompt := []uint64{11, 12, 13, 14, 15, 16, 17, 18}
	f.report("w1", 5000)
	f.report("w2", 5000)
	kvApply(t, x, "w1", 1, prompt, nil)
	d := f.arrive("premium", 400, func(a *request.Arrival) { a.Hashes = prompt })
	f.wantKind(d, Queued)
	if d.Req.Cached != 8*16 {
		t.Fatalf("cached at arrival = %d, want %d", d.Req.Cached, 8*16)
	}
	kvApply(t, x, "w1", 2, nil, prompt) // w1 evicts the prefix
	kvApply(t, x, "w2", 1, prompt, nil) // w2 has it now
	f.report("w1", 0)
	f.report("w2", 16) // one block more than w1
	got := f.s.Next(f.now)
	f.wantKind(got, Dispatch)
	if got.Worker != "w2" {
		t.Fatalf("dispatched to %s, want w2 (the only holder at dispatch)", got.Worker)
	}
	// The decision carries the overlap hit of the dispatch (for
	// fairdispatch_kv_overlap_blocks_total): 8 of 8 blocks.
	if got.KVPrompt != 8 || got.KVOverlap != 8 {
		t.Fatalf("decision overlap %d of %d blocks, want 8 of 8", got.KVOverlap, got.KVPrompt)
	}
	// A request without hashes: nothing to count.
	f.report("w1", 0)
	f.report("w2", 0)
	if d := f.arrive("premium", 400); d.Kind != Dispatch || d.KVPrompt != 0 || d.KVOverlap != 0 {
		t.Fatalf("a request without hashes: kind %d, overlap %d of %d blocks; want a dispatch, 0 of 0", d.Kind, d.KVOverlap, d.KVPrompt)
	}
}

// TestKVExpiredWorkerDropped: a worker whose load reports stop is dropped
// from the index with it; its next event then shows a gap.
func TestKVExpiredWorkerDropped(t *testing.T) {
	f, x := kvFixture(t)
	f.report("w1", 0)
	kvApply(t, x, "w1", 1, []uint64{1, 2}, nil)
	f.now += 4e9 // past the report's 3 s TTL
	f.s.Tick(f.now, nil)
	if st := x.Stats(); st.Ranks != 0 || st.Blocks != 0 {
		t.Fatalf("after the worker expired: %+v, want an empty index", st)
	}
	ev := &wire.KVEvent{Instance: "a", ID: 2}
	if r, err := x.Apply("w1", ev); err != nil || !r.Gap {
		t.Fatalf("its next event: %+v, %v; want a gap", r, err)
	}
}

// TestKVNegativeControl shows that the freshness test can fail: without
// block hashes, the same story goes to w1, the less loaded worker.
func TestKVNegativeControl(t *testing.T) {
	f, x := kvFixture(t)
	prompt := []uint64{11, 12, 13, 14, 15, 16, 17, 18}
	f.report("w1", 5000)
	f.report("w2", 5000)
	kvApply(t, x, "w2", 1, prompt, nil)
	f.wantKind(f.arrive("premium", 400), Queued)
	f.report("w1", 0)
	f.report("w2", 16)
	if got := f.s.Next(f.now); got.Kind != Dispatch || got.Worker != "w1" {
		t.Fatalf("got %+v, want a dispatch to w1", got)
	}
}

// TestKVPlainAfterHashedOnTheIndex: with 16 live workers a request without
// block hashes is placed from the selection index; one with hashes, just
// before it, was scored by a scan with the KV index. The plain one must not
// be taken for KV-scored (it has no blocks: reading them crashed the actor).
func TestKVPlainAfterHashedOnTheIndex(t *testing.T) {
	f, x := kvFixture(t)
	for i := range 16 {
		f.report(fmt.Sprintf("w%02d", i), 0)
	}
	prompt := []uint64{1, 2, 3}
	kvApply(t, x, "w03", 1, prompt, nil)
	d := f.arrive("premium", 400, func(a *request.Arrival) { a.Hashes = prompt })
	f.wantKind(d, Dispatch)
	if d.Worker != "w03" || d.KVPrompt != 3 || d.KVOverlap != 3 {
		t.Fatalf("hashed request: %s, overlap %d of %d blocks; want w03, 3 of 3", d.Worker, d.KVOverlap, d.KVPrompt)
	}
	d = f.arrive("premium", 400)
	f.wantKind(d, Dispatch)
	if d.KVPrompt != 0 || d.KVOverlap != 0 || d.Prefill != 400 {
		t.Fatalf("plain request: overlap %d of %d blocks, prefill %d; want none and 400", d.KVOverlap, d.KVPrompt, d.Prefill)
	}
}
