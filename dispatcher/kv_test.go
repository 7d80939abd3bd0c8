package dispatcher

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/ingest"
	"fairdispatch/kvindex"
	"fairdispatch/metrics"
	"fairdispatch/scheduler"
	"fairdispatch/wire"
)

type resyncCall struct {
	worker string
	rank   int32
}

// newKVFixture is newFixture with a KV cache index in the scheduler and the
// actor, and a recorder of resync requests.
func newKVFixture(t *testing.T) (*fixture, *kvindex.Index, *[]resyncCall) {
	t.Helper()
	pol, err := configs.Parse("t.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	var calls []resyncCall
	now := time.Unix(1_700_000_000, 0)
	f := &fixture{b: &fakeBus{}, rel: &countingReleaser{}, now: now}
	s := scheduler.New(scheduler.Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 1)), KV: x}, now.UnixNano())
	f.a = New(Config{Stream: "DISPATCH_REQ", Prefix: "dispatch", AckWait: 30 * time.Second, DispatchTimeout: 2 * time.Second,
		Now: func() time.Time { return f.now }}, Deps{
		Scheduler: s, Handshaker: f.b, DeadLetters: f.b, Consumer: f.rel,
		Keeper:  ingest.NewKeeper(30*time.Second, zerolog.Nop()),
		Outcome: func(_ string, o wire.Outcome) error { f.outcomes = append(f.outcomes, o); return nil },
		Metrics: metrics.New(nil, classNames(pol)), Log: zerolog.Nop(),
		KV: x,
		KVResync: func(w string, rank int32) error {
			calls = append(calls, resyncCall{w, rank})
			return nil
		},
	})
	f.a.SetLeader(true)
	return f, x, &calls
}

// kv hands a raw event to the actor and applies what it queued, as Run does.
func (f *fixture) kv(token string, ev *wire.KVEvent) {
	b, err := wire.EncodeKVEvent(ev)
	if err != nil {
		panic(err)
	}
	f.kvRaw(token, b)
}

func (f *fixture) kvRaw(token string, body []byte) {
	f.a.KVEvent(token, body, f.now.Add(-time.Second))
	evs := f.a.kv.take()
	for i := range evs {
		f.a.applyKV(&evs[i])
	}
}

// TestActorKVEvents: events from the stream feed the index the scheduler
// scores with, so a request with block hashes goes to the worker holding its
// prefix; malformed events are dropped; a gap makes the rank stale and the
// actor asks the worker to resynchronise, again every kvResyncEvery while it
// stays stale, and no more once it has.
func TestActorKVEvents(t *testing.T) {
	f, x, calls := newKVFixture(t)
	f.now = f.now.Add(time.Second)
	f.report("w1", 0)
	f.report("w2", 0)
	prompt := []uint64{11, 12, 13, 14}
	ev := &wire.KVEvent{Instance: "i", ID: 1}
	ev.Stored[wire.Device] = prompt
	f.kv("w2", ev)
	f.kvRaw("w 1", []byte(`{"instance":"i","event_id":1}`))      // not a worker id
	f.kvRaw("w1", []byte(`{"instance":"i","event_id":1,"x":[}`)) // not JSON
	if st := x.Stats(); st.Blocks != 4 || st.Ranks != 1 {
		t.Fatalf("index %+v, want w2's 4 blocks only", st)
	}
	f.deliver(1, "premium", nats.Header{"Dispatch-ISL-Tokens": {"64"}, "Dispatch-Block-Hashes": {wire.EncodeHashes(prompt)}})
	if len(f.b.sent) != 1 || f.b.sent[0].worker != "w2" {
		t.Fatalf("sent %+v, want one dispatch to w2, which holds the prompt", f.b.sent)
	}
	if got := f.b.sent[0].hdr.Get("Dispatch-Cost"); got != "1" {
		t.Fatalf("Dispatch-Cost %q, want 1 (64 tokens, all cached at admission)", got)
	}

	gap := &wire.KVEvent{Instance: "i", ID: 3, Rank: 1}
	f.kv("w1", gap)
	if len(*calls) != 1 || (*calls)[0] != (resyncCall{"w1", 1}) {
		t.Fatalf("resync requests %v, want one for w1 rank 1", *calls)
	}
	f.a.kvTick(f.now.Add(kvResyncEvery))
	if len(*calls) != 2 {
		t.Fatalf("after %v: %d resync requests, want a second one", kvResyncEvery, len(*calls))
	}
	resync := &wire.KVEvent{Instance: "i", ID: 4, Rank: 1, Cleared: wire.AllTiers}
	f.kv("w1", resync)
	f.a.kvTick(f.now.Add(2 * kvResyncEvery))
	if len(*calls) != 2 || x.Stale("w1", 1) {
		t.Fatalf("after the resync: %d requests, stale %v; want no more and not stale", len(*calls), x.Stale("w1", 1))
	}
}
