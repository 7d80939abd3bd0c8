package workerkit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/jsstorage"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// kvEngine is a fake engine: the blocks each rank holds per tier, told to
// the helper under mu as a real engine would.
type kvEngine struct {
	mu   sync.Mutex
	w    *workerkit.Worker
	held map[int]*[wire.NumTiers]map[uint64]bool
}

func (e *kvEngine) tiers(rank int) *[wire.NumTiers]map[uint64]bool {
	if e.held[rank] == nil {
		e.held[rank] = &[wire.NumTiers]map[uint64]bool{}
		for t := range e.held[rank] {
			e.held[rank][t] = map[uint64]bool{}
		}
	}
	return e.held[rank]
}

func (e *kvEngine) store(t *testing.T, rank int, tier wire.Tier, hs ...uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range hs {
		e.tiers(rank)[tier][h] = true
	}
	if err := e.w.CacheStored(rank, tier, hs); err != nil {
		t.Fatal(err)
	}
}

func (e *kvEngine) remove(t *testing.T, rank int, tier wire.Tier, hs ...uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range hs {
		delete(e.tiers(rank)[tier], h)
	}
	if err := e.w.CacheRemoved(rank, tier, hs); err != nil {
		t.Fatal(err)
	}
}

func (e *kvEngine) clearTiers(t *testing.T, rank int, tiers wire.Tiers) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for tier := range wire.NumTiers {
		if tiers.Has(tier) {
			clear(e.tiers(rank)[tier])
		}
	}
	if err := e.w.CacheCleared(rank, tiers); err != nil {
		t.Fatal(err)
	}
}

// resync is the KVConfig.Resync callback.
func (e *kvEngine) resync(rank int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var held [wire.NumTiers][]uint64
	for t, m := range e.tiers(rank) {
		for h := range m {
			held[t] = append(held[t], h)
		}
	}
	_ = e.w.CacheResync(rank, &held)
}

// kvReader applies the stream's events to a plain model of what each rank
// holds in each tier, following docs/protocol.md, KV cache events (a new
// instance drops everything; cleared, then removed, then stored), and counts
// the gaps in each rank's event_id.
type kvReader struct {
	mu     sync.Mutex
	held   map[int32]*[wire.NumTiers]map[uint64]bool
	inst   map[int32]string
	lastID map[int32]uint64
	events int
	gaps   int
	drop   int // events still to drop as lost
	last   wire.KVEvent
}

func readKV(t *testing.T, js jetstream.JetStream) *kvReader {
	t.Helper()
	r := &kvReader{held: map[int32]*[wire.NumTiers]map[uint64]bool{}, inst: map[int32]string{}, lastID: map[int32]uint64{}}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_KV", Subjects: []string{"dispatch.kv.*"}}); err != nil {
		t.Fatal(err)
	}
	c, err := js.OrderedConsumer(ctx, "DISPATCH_KV", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		ev, err := wire.ParseKVEvent(m.Data())
		if err != nil {
			t.Errorf("event %s: %v", m.Data(), err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events++
		r.last = ev
		if r.drop > 0 {
			r.drop--
			return
		}
		r.apply(&ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return r
}

// apply applies one event to the model; r.mu is held.
func (r *kvReader) apply(ev *wire.KVEvent) {
	tiers := r.held[ev.Rank]
	if tiers == nil || r.inst[ev.Rank] != ev.Instance {
		tiers = &[wire.NumTiers]map[uint64]bool{}
		for t := range tiers {
			tiers[t] = map[uint64]bool{}
		}
		r.held[ev.Rank], r.inst[ev.Rank], r.lastID[ev.Rank] = tiers, ev.Instance, 0
	}
	if ev.ID > r.lastID[ev.Rank]+1 {
		r.gaps++
	}
	r.lastID[ev.Rank] = ev.ID
	for t := range wire.NumTiers {
		if ev.Cleared.Has(t) {
			clear(tiers[t])
		}
		for _, h := range ev.Removed[t] {
			delete(tiers[t], h)
		}
		for _, h := range ev.Stored[t] {
			tiers[t][h] = true
		}
	}
}

// matches reports whether the model holds exactly what the engine holds, per
// rank and tier.
func (r *kvReader) matches(e *kvEngine, ranks []int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, rank := range ranks {
		got := r.held[int32(rank)]
		for tier, m := range e.tiers(rank) {
			n := 0
			if got != nil {
				n = len(got[tier])
			}
			if n != len(m) {
				return false
			}
			for h := range m {
				if !got[tier][h] {
					return false
				}
			}
		}
	}
	return true
}

// kvServer starts a server and returns a connection and its JetStream.
func kvServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// startKVWorker starts a worker of cfg that refuses every request and
// publishes the KV cache events of kv with a kvEngine, whose resync is
// kv.Resync; the worker is closed at the test's end.
func startKVWorker(t *testing.T, nc *nats.Conn, cfg workerkit.Config, kv workerkit.KVConfig) (*workerkit.Worker, *kvEngine) {
	t.Helper()
	w, err := workerkit.New(nc, cfg, workerkit.HandlerFunc(func(*workerkit.Request) bool { return false }), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	e := &kvEngine{w: w, held: map[int]*[wire.NumTiers]map[uint64]bool{}}
	kv.Resync = e.resync
	if err := w.EnableKVEvents(kv); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, e
}

// counts returns the events still to drop and the gaps seen.
func (r *kvReader) counts() (drop, gaps int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drop, r.gaps
}

// TestKVEventsFollowTheEngine: an engine's stores, removals (including a
// block stored and removed within one flush interval, which must not read as
// held) and clears reach the stream as events that rebuild its exact state in
// an index, with no gap, on two ranks.
func TestKVEventsFollowTheEngine(t *testing.T) {
	nc, js := kvServer(t)
	rd := readKV(t, js)
	w, e := startKVWorker(t, nc, workerkit.Config{ID: "w1", DPStart: 2, DPSize: 2}, workerkit.KVConfig{FlushInterval: 50 * time.Millisecond})
	if err := w.CacheStored(4, wire.Device, []uint64{1}); err == nil {
		t.Fatal("CacheStored on rank 4 of a worker with ranks 2 and 3 succeeded")
	}
	ranks := []int{2, 3}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		for range 50 {
			rank := ranks[rng.IntN(2)]
			tier := wire.Tier(rng.IntN(int(wire.NumTiers)))
			h := uint64(rng.IntN(40) + 1)
			switch rng.IntN(10) {
			case 0:
				e.clearTiers(t, rank, 1<<tier)
			case 1, 2, 3:
				e.remove(t, rank, tier, h)
			default:
				e.store(t, rank, tier, h)
			}
		}
		// Stored then removed at once: within one flush interval.
		e.store(t, 2, wire.Device, 1000+uint64(round))
		e.remove(t, 2, wire.Device, 1000+uint64(round))
		natstest.Eventually(t, 10*time.Second, func() bool { return rd.matches(e, ranks) }, "round %d: the index matches the engine", round)
	}
	if _, gaps := rd.counts(); gaps != 0 {
		t.Fatalf("%d gaps in the events", gaps)
	}
}

// TestKVResyncOnRequest: a resynchronisation request on dispatch.kvsync.w1
// makes the helper publish a cleared of every tier followed by what the
// engine holds; an index that had lost the rank (stale) is exact again.
func TestKVResyncOnRequest(t *testing.T) {
	nc, js := kvServer(t)
	rd := readKV(t, js)
	w, e := startKVWorker(t, nc, workerkit.Config{ID: "w1"}, workerkit.KVConfig{})
	// More than one event's worth, so the resync spans two events.
	many := make([]uint64, wire.MaxHashes+10)
	for i := range many {
		many[i] = uint64(i + 1)
	}
	e.store(t, 0, wire.Host, many...)
	natstest.Eventually(t, 10*time.Second, func() bool { return rd.matches(e, []int{0}) }, "the index matches the engine")
	// The reader loses an event: the next one shows a gap, which makes the
	// rank stale and drops its blocks.
	rd.mu.Lock()
	rd.drop = 1
	rd.mu.Unlock()
	e.store(t, 0, wire.Device, 999_999)
	natstest.Eventually(t, 10*time.Second, func() bool { drop, _ := rd.counts(); return drop == 0 }, "an event lost")
	e.store(t, 0, wire.Device, 888_888)
	natstest.Eventually(t, 10*time.Second, func() bool { _, gaps := rd.counts(); return gaps == 1 }, "the gap seen")
	if rd.matches(e, []int{0}) {
		t.Fatal("the index matches after the gap")
	}
	if err := nc.Publish("dispatch.kvsync.w1", []byte(`{"dp_rank":0}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return rd.matches(e, []int{0}) }, "the index matches after the resync")
	st := w.KVStats()
	if st.Requests != 1 || st.Resyncs < 2 || st.Failed != 0 {
		t.Fatalf("stats %+v: want 1 request, at least 2 resyncs (start, request), no failure", st)
	}
}

// TestKVResyncOfALargeRank: a rank holding more blocks than the helper keeps
// unpublished (524,288: 64 events of 8192) is still resynchronised: its
// snapshot is not counted against that bound, which would drop it and ask
// for another for ever, and an index built from the stream matches it.
func TestKVResyncOfALargeRank(t *testing.T) {
	nc, js := kvServer(t)
	rd := readKV(t, js)
	_, e := startKVWorker(t, nc, workerkit.Config{ID: "w1"}, workerkit.KVConfig{})
	many := make([]uint64, 64*wire.MaxHashes+1000)
	for i := range many {
		many[i] = uint64(i + 1)
	}
	e.store(t, 0, wire.Host, many...) // over the bound at once: dropped, resynchronised
	// Unfixed, the snapshot was dropped as it was made, and nothing of the
	// rank was ever published.
	natstest.Eventually(t, 30*time.Second, func() bool { return rd.matches(e, []int{0}) }, "the index matches the engine")
}

// TestKVPublishRecovers: without a KV stream every publish fails; the
// helper keeps resynchronising the rank (with a back-off), and once the
// stream exists the resynchronisation reaches it and an index built from the
// stream matches the engine.
func TestKVPublishRecovers(t *testing.T) {
	nc, js := kvServer(t)
	w, e := startKVWorker(t, nc, workerkit.Config{ID: "w1"}, workerkit.KVConfig{})
	e.store(t, 0, wire.Device, 1, 2, 3)
	natstest.Eventually(t, 20*time.Second, func() bool { return w.KVStats().Failed >= 2 }, "failed publishes")
	rd := readKV(t, js) // creates the stream
	natstest.Eventually(t, 20*time.Second, func() bool { return rd.matches(e, []int{0}) }, "the index matches once the stream exists")
}

// TestKVRefusedPublishesBackOff: with the KV stream full (its own limit,
// discard new: every event refused with "maximum bytes exceeded") and the
// engine changing its cache every 10 ms, the helper's refused
// resynchronisations follow the back-off (100 ms doubling to 5 s): over 3 s
// at most about 7 rounds of one resynchronisation each. Before the fix the
// failures of two flushes each landed inside the other's wait, the wait never
// grew, and 3 s saw about 35 refused events. Once the stream has room, the
// next resynchronisation reaches it and an index built from the stream
// matches the engine.
func TestKVRefusedPublishesBackOff(t *testing.T) {
	nc, js := kvServer(t)
	ctx := context.Background()
	rd := readKV(t, js) // creates the stream
	cfg := jetstream.StreamConfig{Name: "DISPATCH_KV", Subjects: []string{"dispatch.kv.*"}, MaxBytes: 2048, Discard: jetstream.DiscardNew}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	filler, err := wire.EncodeKVEvent(&wire.KVEvent{Instance: "filler", ID: 1, Rank: 9, Cleared: wire.AllTiers})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "dispatch.kv.filler", filler); err != nil {
			if reason, ok := jsstorage.Refused(err); !ok || reason != wire.RefusalMaxBytes {
				t.Fatalf("filling the KV stream: %v, want a refusal %q", err, wire.RefusalMaxBytes)
			}
			break
		}
		if i == 1000 {
			t.Fatal("1000 events stored in a 2 KiB stream")
		}
	}
	w, e := startKVWorker(t, nc, workerkit.Config{ID: "w1"}, workerkit.KVConfig{})
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for h := uint64(1); time.Since(start) < 3*time.Second; h++ {
		e.store(t, 0, wire.Device, h)
		<-tick.C
	}
	// Rounds start at 0, 0.1, 0.3, 0.7, 1.5, 3.1 s...: each refuses the
	// resynchronisation, and at most one batch of changes made while it ran.
	elapsed := time.Since(start)
	rounds := uint64(2)
	for wait, at := 100*time.Millisecond, 100*time.Millisecond; at <= elapsed; wait, at = min(2*wait, 5*time.Second), at+min(2*wait, 5*time.Second) {
		rounds++
	}
	st := w.KVStats()
	t.Logf("%+v in %v (at most %d rounds)", st, elapsed, rounds)
	if st.Failed < 2 || st.Failed > 2*rounds {
		t.Fatalf("%d events refused in %v, want 2 to %d: the helper does not back off", st.Failed, elapsed, 2*rounds)
	}
	cfg.MaxBytes = 1 << 20
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool { return rd.matches(e, []int{0}) }, "the index matches once the stream has room")
}
