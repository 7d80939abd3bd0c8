package livepolicy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/configs"
	"fairdispatch/internal/natstest"
)

const (
	goodA = "default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\npolicy_classes:\n  - {name: a, policy_family: a, cache_bucket: all, quantum: 1}\n"
	goodB = "default_policy_family: b\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\npolicy_classes:\n  - {name: b, policy_family: b, cache_bucket: all, quantum: 2}\n"
	bad   = "default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\npolicy_classes:\n  - {name: a, policy_family: a, cache_bucket: all, quantum: 0}\n"
)

func openStore(t *testing.T) (*Store, jetstream.KeyValue) {
	t.Helper()
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js, "fairdispatch_policy", BucketConfig{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "fairdispatch_policy")
	if err != nil {
		t.Fatal(err)
	}
	return s, kv
}

func TestSeedNeverOverwritesAndPutValidates(t *testing.T) {
	s, kv := openStore(t)
	ctx := context.Background()
	if _, err := s.Get(ctx); !errors.Is(err, ErrNoPolicy) {
		t.Fatalf("Get on an empty bucket: %v, want ErrNoPolicy", err)
	}
	rev, created, err := s.Seed(ctx, []byte(goodA))
	if err != nil || !created || rev != 1 {
		t.Fatalf("first Seed = %d %v %v, want revision 1 created", rev, created, err)
	}
	if _, created, err := s.Seed(ctx, []byte(goodB)); err != nil || created {
		t.Fatalf("second Seed created %v (%v), want false: a seed never overwrites", created, err)
	}
	if _, _, err := s.Put(ctx, "bad.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "bad.yaml:4: policy_classes[0].quantum") {
		t.Fatalf("Put of an invalid policy: %v, want its validation error", err)
	}
	if rev, _, err := s.Put(ctx, "b.yaml", []byte(goodB)); err != nil || rev != 2 {
		t.Fatalf("Put = %d, %v; want revision 2", rev, err)
	}
	if st, _ := kv.Status(ctx); st.History() != History {
		t.Errorf("bucket history %d, want %d", st.History(), History)
	}
	h, err := s.History(ctx)
	if err != nil || len(h) != 2 || string(h[0].YAML) != goodA || h[1].Revision != 2 {
		t.Fatalf("History = %+v, %v; want revisions 1 (a) and 2", h, err)
	}
	if r, err := s.At(ctx, 1); err != nil || string(r.YAML) != goodA {
		t.Fatalf("At(1) = %+v, %v", r, err)
	}
}

func TestStartRunsTheBucketsValidRevisionElseTheFallback(t *testing.T) {
	s, kv := openStore(t)
	ctx := context.Background()
	fallback, _ := configs.Parse("file", []byte(goodA))
	st, err := Start(ctx, s, []byte(goodA), fallback, zerolog.Nop())
	if err != nil || st.Refused != nil || st.Current.Revision != 1 || st.Running != 1 || st.Policy.Classes[0].Name != "a" {
		t.Fatalf("Start on an empty bucket: %+v, err %v; want the seed as revision 1", st, err)
	}
	if _, err := kv.Put(ctx, Key, []byte(goodB)); err != nil {
		t.Fatal(err)
	}
	st, _ = Start(ctx, s, []byte(goodA), fallback, zerolog.Nop())
	if st.Current.Revision != 2 || st.Running != 2 || st.Policy.Classes[0].Name != "b" {
		t.Fatalf("Start with revision 2 in the bucket: %+v, want the bucket's b", st)
	}
	// An invalid revision 3: the last good one (2) runs, as on the
	// dispatchers that refused 3 live, not the file's a.
	if _, err := kv.Put(ctx, Key, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	st, err = Start(ctx, s, []byte(goodA), fallback, zerolog.Nop())
	if err != nil || st.Refused == nil || st.Current.Revision != 3 || st.Running != 2 || st.Policy.Classes[0].Name != "b" {
		t.Fatalf("Start with an invalid revision 3: %+v err %v, want 3 refused and revision 2's b running", st, err)
	}
	// So after a delete of the key, with or without a file: a restart with
	// its --policy-config does not write the file over the delete (every
	// running dispatcher would apply it, undoing the live b).
	if err := kv.Delete(ctx, Key); err != nil {
		t.Fatal(err)
	}
	for _, seed := range [][]byte{nil, []byte(goodA)} {
		if st, _ = Start(ctx, s, seed, fallback, zerolog.Nop()); st.Refused == nil || st.Current.Revision != 4 || st.Running != 2 || st.Policy.Classes[0].Name != "b" {
			t.Fatalf("Start after a delete, seed %q: %+v, want the delete (4) refused and revision 2's b running", seed, st)
		}
	}
	// A purge leaves no valid revision: the running dispatchers keep what
	// they held, a restarted one would run its file. The seed makes them one.
	if err := kv.Purge(ctx, Key); err != nil {
		t.Fatal(err)
	}
	if st, _ = Start(ctx, s, []byte(goodA), fallback, zerolog.Nop()); st.Refused != nil || st.Current.Revision != 6 || st.Running != 6 || st.Policy.Classes[0].Name != "a" {
		t.Fatalf("Start after a purge: %+v, want the file seeded as revision 6 (5 is the purge) and running", st)
	}
}

// TestStartWithNoValidRevisionRunsTheFallback: when the history keeps no
// valid revision, the fallback runs.
func TestStartWithNoValidRevisionRunsTheFallback(t *testing.T) {
	s, kv := openStore(t)
	ctx := context.Background()
	fallback, _ := configs.Parse("file", []byte(goodA))
	if _, err := kv.Put(ctx, Key, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	st, err := Start(ctx, s, nil, fallback, zerolog.Nop())
	if err != nil || st.Refused == nil || st.Running != 0 || st.Policy != fallback {
		t.Fatalf("Start with only an invalid revision: %+v err %v, want it refused and the fallback", st, err)
	}
}

// applier records what a Follower hands it.
type applier struct {
	mu      sync.Mutex
	applied []uint64
	refused []uint64
}

func (a *applier) ApplyPolicy(_ context.Context, rev uint64, _ time.Time, _ *configs.Policy) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied = append(a.applied, rev)
	return nil
}

func (a *applier) RefusePolicy(rev uint64, _ time.Time, _ error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused = append(a.refused, rev)
}

func (a *applier) seen() ([]uint64, []uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]uint64(nil), a.applied...), append([]uint64(nil), a.refused...)
}

func TestFollowerAppliesValidAndRefusesInvalidRevisions(t *testing.T) {
	s, kv := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, _, err := s.Seed(ctx, []byte(goodA)); err != nil {
		t.Fatal(err)
	}
	a := &applier{}
	f := &Follower{Store: s, Applier: a, Log: zerolog.Nop(), Running: 1}
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	// One at a time: a watch that starts late sees only the latest revision.
	steps := []struct {
		put              string // "" deletes
		applied, refused int
	}{{bad, 0, 1}, {goodB, 1, 1}, {"", 1, 2}}
	for _, st := range steps {
		var err error
		if st.put == "" {
			err = kv.Delete(ctx, Key)
		} else {
			_, err = kv.Put(ctx, Key, []byte(st.put))
		}
		if err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, func() bool {
			ap, re := a.seen()
			return len(ap) == st.applied && len(re) == st.refused
		}, "applied %d and refused %d", st.applied, st.refused)
	}
	ap, re := a.seen()
	if ap[0] != 3 || re[0] != 2 || re[1] != 4 {
		t.Errorf("applied %v refused %v, want applied [3] refused [2 4] (revision 1 runs already)", ap, re)
	}
	cancel()
	<-done
}

// TestFullStore: with the server's file store full, a put fails naming
// JetStream's reason and saying that the store is full and the running
// policy stays; a dispatcher starting with a seed still starts, running the
// file's policy (the fallback), and a put stores once there is room.
func TestFullStore(t *testing.T) {
	ns := natstest.Start(t, func(o *server.Options) { o.JetStreamMaxStore = 32 << 10 })
	js, err := jetstream.New(natstest.Connect(t, ns.Running()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(ctx, js, "fairdispatch_policy", BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := js.Publish(ctx, "fill", make([]byte, 1024)); err != nil {
			break
		}
	}
	_, _, err = s.Put(ctx, "b.yaml", []byte(goodB))
	if err == nil || !strings.Contains(err.Error(), "insufficient resources") || !strings.Contains(err.Error(), "store is full") ||
		!strings.Contains(err.Error(), "the policy that runs stays") {
		t.Fatalf("Put into a full store: %v, want JetStream's reason and what it means", err)
	}
	fallback, err := configs.Parse("a.yaml", []byte(goodA))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Start(ctx, s, []byte(goodA), fallback, zerolog.Nop())
	if err != nil || st.Policy != fallback || st.Current.Revision != 0 || st.Running != 0 || st.Refused != nil {
		t.Fatalf("Start with a seed into a full store: %v, %+v; want the fallback", err, st)
	}
	if err := fill.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if rev, _, err := s.Put(ctx, "b.yaml", []byte(goodB)); err != nil || rev != 1 {
		t.Fatalf("Put once there is room = %d, %v; want revision 1", rev, err)
	}
}

// leaderlessKV answers no responders to its first n reads and creates, as
// JetStream does for a replicated bucket whose stream has no leader yet.
type leaderlessKV struct {
	jetstream.KeyValue
	n int
}

func (k *leaderlessKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.n > 0 {
		k.n--
		return nil, nats.ErrNoResponders
	}
	return k.KeyValue.Get(ctx, key)
}

func (k *leaderlessKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.n > 0 {
		k.n--
		return 0, nats.ErrNoResponders
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

// TestStartWaitsForTheBucketsLeader: a dispatcher starting while the policy
// bucket's stream elects a leader (seen on a 3-node cluster under load:
// "policy bucket fairdispatch_policy: get: nats: no responders available")
// waits for it; past LeaderWait the error stands.
func TestStartWaitsForTheBucketsLeader(t *testing.T) {
	s, kv := openStore(t)
	s.kv = &leaderlessKV{KeyValue: kv, n: 5}
	st, err := Start(context.Background(), s, []byte(goodA), nil, zerolog.Nop())
	if err != nil || st.Refused != nil || st.Policy == nil || st.Current.Revision == 0 {
		t.Fatalf("Start: %+v, err %v; want the seeded revision", st, err)
	}
	s.kv, s.leaderWait = &leaderlessKV{KeyValue: kv, n: 1 << 30}, 300*time.Millisecond
	if _, err := s.Get(context.Background()); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("Get with no leader past the wait: %v, want no responders", err)
	}
}

const bucket = "fairdispatch_policy"

// memoryBucket opens the policy bucket, in memory, on a new server.
func memoryBucket(t *testing.T) (jetstream.JetStream, *Store) {
	t.Helper()
	_, nc := natstest.StartServer(t)
	js, _ := jetstream.New(nc)
	s, err := Open(context.Background(), js, bucket, BucketConfig{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, s
}

// TestFollowerFollowsABucketMadeAgain: the bucket deleted and made again
// (by an operator, or a memory bucket lost with its server and created by
// the next dispatcher to start) numbers its revisions from 1 anew; a
// running follower, past revision 4 of the old one, applies them rather
// than skipping every one up to 4 and running another policy than the
// dispatchers that start later.
func TestFollowerFollowsABucketMadeAgain(t *testing.T) {
	js, s := memoryBucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, y := range []string{goodA, goodB, goodA, goodB} {
		if _, _, err := s.Put(ctx, "x", []byte(y)); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := s.Get(ctx)
	if err != nil || cur.Revision != 4 {
		t.Fatalf("current %+v, %v; want revision 4", cur, err)
	}
	old := watchCheck
	watchCheck = 100 * time.Millisecond
	defer func() { watchCheck = old }()
	a := &applier{}
	f := &Follower{Store: s, Applier: a, Log: zerolog.Nop(), Running: cur.Revision, RunningCreated: cur.Created}
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := js.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, js, bucket, BucketConfig{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := again.Seed(ctx, []byte(goodA)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := again.Put(ctx, "x", []byte(goodB)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		ap, _ := a.seen()
		return len(ap) > 0 && ap[len(ap)-1] == 2
	}, "the new bucket's revision 2 applied")
}

// TestWatchEndsWhenTheBucketIsMadeAgain: a watch on a bucket deleted and
// made again ends with an error saying so (its ordered consumer would
// resume past the old bucket's last sequence, skipping the new one's
// first revisions), so that the follower starts a new one.
func TestWatchEndsWhenTheBucketIsMadeAgain(t *testing.T) {
	js, s := memoryBucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, _, err := s.Put(ctx, "x", []byte(goodA)); err != nil {
		t.Fatal(err)
	}
	old := watchCheck
	watchCheck = 50 * time.Millisecond
	defer func() { watchCheck = old }() // after the watch has ended, below
	started := make(chan struct{})
	var once sync.Once
	ended := make(chan error, 1)
	go func() { ended <- s.Watch(ctx, func(Revision) { once.Do(func() { close(started) }) }) }()
	var err2 error
	select {
	case <-started: // the watch delivered the current revision: it runs
	case err2 = <-ended:
		t.Fatalf("the watch ended before it delivered anything: %v", err2)
	}
	if err := js.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, js, bucket, BucketConfig{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	select {
	case err2 = <-ended:
	case <-time.After(30 * time.Second):
		cancel()
		err2 = <-ended
		err2 = fmt.Errorf("went on for 30 s, then %v", err2)
	}
	if !errors.Is(err2, ErrMadeAgain) {
		t.Fatalf("the watch on a bucket made again ended with %v, want an error saying so", err2)
	}
}

// TestMadeAgain: a stream is another when its creation time changed, or
// when its last sequence is below a revision already delivered (a cluster
// rebuilds a memory stream lost with its server empty, under its old
// creation time); the same stream grown, or purged (sequences kept), is not.
func TestMadeAgain(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(created time.Time, last uint64) *jetstream.StreamInfo {
		return &jetstream.StreamInfo{Created: created, State: jetstream.StreamState{LastSeq: last}}
	}
	for _, c := range []struct {
		now       *jetstream.StreamInfo
		delivered uint64
		want      bool
	}{
		{at(t0, 4), 4, false},
		{at(t0, 9), 4, false},
		{at(t0.Add(time.Second), 9), 4, true},
		{at(t0, 2), 4, true},
	} {
		if got := madeAgain(at(t0, 4), c.now, c.delivered); got != c.want {
			t.Errorf("first created %v, last 4; now %v, last %d; %d delivered: made again %v, want %v",
				t0, c.now.Created, c.now.State.LastSeq, c.delivered, got, c.want)
		}
	}
}
