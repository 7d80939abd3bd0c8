package leader

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/naming"
)

func startServer(t *testing.T) *server.Server {
	t.Helper()
	return natstest.Start(t, nil).Running()
}

// never is a MayHaveLed for a fresh deployment: no dispatcher led before.
func never(context.Context, time.Time) bool { return false }

type candidate struct {
	e      *Elector
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	events atomic.Int32 // onChange calls
}

func campaign(t *testing.T, url, id string, ttl time.Duration) *candidate {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return campaignOn(t, nc, Config{ID: id, TTL: ttl, MayHaveLed: never}, nil)
}

// campaignOn runs an Elector of cfg on nc until the end of the test;
// onChange, when not nil, is told of every change too.
func campaignOn(t *testing.T, nc *nats.Conn, cfg Config, onChange func(lead bool)) *candidate {
	t.Helper()
	js, _ := jetstream.New(nc)
	e, err := New(context.Background(), js, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		e.Run(ctx, func(lead bool) {
			c.events.Add(1)
			if onChange != nil {
				onChange(lead)
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// watch samples both candidates until stop and fails if both ever lead at once.
func watch(t *testing.T, a, b *candidate) (stop func()) {
	quit := make(chan struct{})
	var both atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			// b first: in these tests a never leads again once it stopped,
			// so a late read of a cannot pair a past a with a present b
			// however long this goroutine is descheduled between the reads.
			if b.e.Leader() && a.e.Leader() {
				both.Store(true)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() {
		close(quit)
		<-done
		if both.Load() {
			t.Fatal("two leaders at once")
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	natstest.Eventually(t, d, f, "%s", what)
	return time.Since(start)
}

// leaderAndStandby starts a server and candidate a, waits until it leads,
// then starts candidate b, both with ttl, and watches them (watch).
func leaderAndStandby(t *testing.T, ttl time.Duration) (a, b *candidate, stop func()) {
	t.Helper()
	s := startServer(t)
	a = campaign(t, s.ClientURL(), "a", ttl)
	waitFor(t, 20*time.Second, "a to lead", a.e.Leader)
	b = campaign(t, s.ClientURL(), "b", ttl)
	return a, b, watch(t, a, b)
}

func TestOneLeaderAndCleanHandover(t *testing.T) {
	// 6 s: a renews every ttl/4 (1.5 s) and counts its lease valid for 3/4
	// ttl (4.5 s) from a renewal's start, so its renewals have 3 s of slack
	// on a loaded machine before it would step down during the wait below.
	ttl := 6 * time.Second
	a, b, stop := leaderAndStandby(t, ttl)
	time.Sleep(4 * time.Second) // b campaigns at its start and every ttl/4 meanwhile; the behaviour under test is that it does not win
	if b.e.Leader() || !a.e.Leader() {
		t.Fatalf("leaders: a %v b %v, want a only", a.e.Leader(), b.e.Leader())
	}
	a.cancel()
	<-a.done
	// A clean release deletes the key, so b need not wait for it to expire.
	if e, err := a.e.kv.Get(context.Background(), DefaultKey); err == nil && string(e.Value()) == "a" {
		t.Fatalf("after a's release the lease still names a (revision %d), want it deleted", e.Revision())
	}
	waitFor(t, 20*time.Second, "b to lead after a released", b.e.Leader)
	stop()
}

func TestLeaderCutOffStepsDownAndStandbyTakesOver(t *testing.T) {
	// 3 s: a steps down at its first tick 3/4 ttl after its last renewal's
	// start, and the key outlives that renewal by a ttl: watch has ttl/4
	// (750 ms) of timer lateness to spare. And a, which leads from just
	// before b starts, cannot lose its lease before the cut unless it goes
	// 2.25 s without a renewal.
	ttl := 3 * time.Second
	a, b, stop := leaderAndStandby(t, ttl)
	a.nc.Close() // a's renewals now fail: it must step down on its own clock
	// watch checks the safety (never two leaders); the deadline here is only
	// generous, not a measure of speed.
	waitFor(t, 10*time.Second, "a to step down", func() bool { return !a.e.Leader() })
	waitFor(t, 20*time.Second, "b to lead", b.e.Leader)
	stop()
	// a's callback is told of the step-down after its role flips: wait for
	// it, then check that nothing more came (a never leads again).
	waitFor(t, 10*time.Second, "a told of its step-down", func() bool { return a.events.Load() >= 2 })
	if n := a.events.Load(); n != 2 {
		t.Errorf("a saw %d role changes, want 2 (lead, step down)", n)
	}
}

func TestNewValidatesID(t *testing.T) {
	s := startServer(t)
	nc, _ := nats.Connect(s.ClientURL())
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := New(context.Background(), js, Config{}, zerolog.Nop()); err == nil {
		t.Fatal("New without an id: want an error")
	}
}

// TestReleaseAfterAStaleRevision: a renewal cut short by the shutdown may be
// stored although the elector never learned its revision; the release must
// still delete the key, or the standby waits for the whole lease.
func TestReleaseAfterAStaleRevision(t *testing.T) {
	s := startServer(t)
	a := campaign(t, s.ClientURL(), "a", 8*time.Second) // renews every 2 s: no renewal between the update and the release
	waitFor(t, 20*time.Second, "a to lead", a.e.Leader)
	cur, err := a.e.kv.Get(context.Background(), DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	// A renewal the elector did not see: the key moves on without it.
	if _, err := a.e.kv.Update(context.Background(), DefaultKey, []byte("a"), cur.Revision()); err != nil {
		t.Fatal(err)
	}
	a.cancel()
	<-a.done
	if e, err := a.e.kv.Get(context.Background(), DefaultKey); err == nil {
		t.Fatalf("after release the key is still there (value %q, revision %d), want it deleted", e.Value(), e.Revision())
	}
}

// TestBucketPerPrefix: dispatchers of different pools (naming's lease bucket
// per prefix) lead at the same time, each in its own bucket.
func TestBucketPerPrefix(t *testing.T) {
	s := startServer(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var leaders []*Elector
	for _, prefix := range []string{"llama", "qwen", strings.Repeat("x", 232)} {
		n, err := naming.New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(context.Background(), js, Config{Bucket: n.LeaderBucket(), ID: "d-" + prefix[:4], TTL: time.Second, MayHaveLed: never}, zerolog.Nop())
		if err != nil {
			t.Fatalf("prefix %.10s...: %v", prefix, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.Run(ctx, func(bool) {}) }()
		t.Cleanup(func() { cancel(); <-done })
		leaders = append(leaders, e)
	}
	waitFor(t, 5*time.Second, "every pool's dispatcher to lead", func() bool {
		for _, e := range leaders {
			if !e.Leader() {
				return false
			}
		}
		return true
	})
	if _, err := js.KeyValue(context.Background(), DefaultBucket); err == nil {
		t.Errorf("bucket %s exists, want only the pools' buckets", DefaultBucket)
	}
}

// leaseStorage returns the storage of the lease bucket's stream.
func leaseStorage(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StorageType {
	t.Helper()
	st, err := js.Stream(context.Background(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config.Storage
}

// TestLeaseSurvivesAFullFileStore: the lease bucket is created in memory
// storage, so with the server's file store full (every write to a
// file-backed stream refused, "insufficient resources") the leader's
// renewals are stored and it keeps leading. A lease bucket in file storage
// (as an older dispatcher made it) is bound to as it is, with a warning
// saying how to move it; in the full store its renewals are refused, each
// reported to RenewalFailed, and the leader steps down. The file-backed
// bucket is the one of the longest prefix naming accepts: its stream name
// fits the file store. The memory lease's TTL is 4 s, so that a loaded
// machine does not make it lose its lease (3 s without a renewal) or time a
// renewal out (2 s): what must not happen to it is a refusal. The file
// lease's is 2 s: a renewal is tried (and refused) every 500 ms of its 1.5 s
// of validity.
func TestLeaseSurvivesAFullFileStore(t *testing.T) {
	s := natstest.Start(t, func(o *server.Options) { o.JetStreamMaxStore = 32 << 10 }).Running()
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	long, err := naming.New(strings.Repeat("x", 232))
	if err != nil {
		t.Fatal(err)
	}
	fileBucket := long.LeaderBucket()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fileBucket, History: 1, TTL: time.Second, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	type run struct {
		e    *Elector
		logs natstest.Buffer
		mu   sync.Mutex
		errs []error // of the failed renewals
	}
	// refused returns the failed renewals JetStream refused for want of
	// room (insufficient resources), and how many failed in all.
	refused := func(r *run) (refusals []error, failed int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, err := range r.errs {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == 10023 {
				refusals = append(refusals, err)
			}
		}
		return refusals, len(r.errs)
	}
	elect := func(bucket string, ttl time.Duration) *run {
		r := &run{}
		var err error
		cfg := Config{Bucket: bucket, ID: "d1", TTL: ttl, MayHaveLed: never,
			RenewalFailed: func(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }}
		if r.e, err = New(ctx, js, cfg, zerolog.New(&r.logs)); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.e.Run(runCtx, func(bool) {}) }()
		t.Cleanup(func() { cancel(); <-done })
		waitFor(t, 10*time.Second, bucket+" to lead", r.e.Leader)
		return r
	}
	mem, file := elect(DefaultBucket, 4*time.Second), elect(fileBucket, 2*time.Second)
	if got := leaseStorage(t, js, DefaultBucket); got != jetstream.MemoryStorage {
		t.Fatalf("new lease bucket in %v storage, want memory", got)
	}
	if got := leaseStorage(t, js, fileBucket); got != jetstream.FileStorage {
		t.Fatalf("existing lease bucket moved to %v storage, want it kept in file storage", got)
	}
	if out := file.logs.String(); !strings.Contains(out, "file-backed") || !strings.Contains(out, "nats kv del "+fileBucket) {
		t.Errorf("binding to the file-backed bucket logged %q, want a warning saying how to move it", out)
	}
	if out := mem.logs.String(); strings.Contains(out, `"warn"`) {
		t.Errorf("the memory bucket's elector warned: %q", out)
	}

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill"}}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := js.Publish(ctx, "fill", make([]byte, 1024))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10023 {
			break // insufficient resources: the store is full
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r0, err := mem.e.kv.Get(ctx, DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the file-backed lease lost", func() bool { return !file.e.Leader() })
	waitFor(t, 20*time.Second, "two renewals of the memory lease stored in the full store", func() bool {
		e, err := mem.e.kv.Get(ctx, DefaultKey)
		return err == nil && e.Revision() >= r0.Revision()+2
	})
	if refusals, failed := refused(mem); !mem.e.Leader() || len(refusals) != 0 {
		t.Fatalf("memory lease: leader %v, %d renewals failed, refused: %v; want a leader, none refused", mem.e.Leader(), failed, refusals)
	}
	if refusals, failed := refused(file); len(refusals) == 0 {
		t.Fatalf("the file-backed lease's refused renewals were not reported (%d failed renewals reported)", failed)
	}
}

// TestLeaseBucketFallsBackToFile: where JetStream memory is refused (here
// the account's memory limit is 0), the lease bucket is created in file
// storage, with a warning, and the election works.
func TestLeaseBucketFallsBackToFile(t *testing.T) {
	s := startServer(t)
	if err := s.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{
		"": {MaxMemory: 0, MaxStore: -1, MaxStreams: -1, MaxConsumers: -1},
	}); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	var logs natstest.Buffer
	e, err := New(context.Background(), js, Config{ID: "d1", TTL: time.Second, MayHaveLed: never}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseStorage(t, js, DefaultBucket); got != jetstream.FileStorage {
		t.Fatalf("lease bucket in %v storage, want file", got)
	}
	if !strings.Contains(logs.String(), "memory storage refused") {
		t.Errorf("logged %q, want a warning that memory storage was refused", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, func(bool) {}) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 10*time.Second, "to lead", e.Leader)
}

// TestLeaseBucketLostWithItsServer: in a fresh deployment's first bucket a
// lease is taken at once, and handed over at once after a release. The
// memory lease bucket is lost when its (single) server restarts. The
// leader, finding it gone, steps down at once; a campaign creates it again;
// and since a dispatcher led before it was created (MayHaveLed), nobody
// creates the key until the new bucket is a TTL old by the server's clock,
// so that a leader that missed the loss has stopped first. Then one of the
// two leads again, and the two never lead at once.
func TestLeaseBucketLostWithItsServer(t *testing.T) {
	ns := natstest.Start(t, nil)
	const ttl = 1500 * time.Millisecond
	start := firstLead(t, ns)
	a := start("a", ttl)
	waitFor(t, 10*time.Second, "a to lead at once in a fresh deployment", a.e.Leader)
	b := start("b", ttl)
	stop := watch(t, a, b)
	// A handover in the first bucket is at once, however young the bucket.
	a.cancel()
	<-a.done
	waitFor(t, 10*time.Second, "b to lead after a released", b.e.Leader)
	a = start("a", ttl)
	stop()
	stop = watch(t, b, a)
	ns.Restart()
	waitFor(t, 10*time.Second, "b to step down", func() bool { return !b.e.Leader() })
	waitFor(t, 20*time.Second, "a or b to lead again", func() bool { return a.e.Leader() || b.e.Leader() })
	stop()
	js, _ := jetstream.New(natstest.Connect(t, ns.Running()))
	st, err := js.Stream(context.Background(), "KV_"+DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		t.Errorf("lease bucket created again in %v storage, want memory", st.CachedInfo().Config.Storage)
	}
	kv, err := js.KeyValue(context.Background(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, err := kv.Get(context.Background(), DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	// The key's first revision in the new bucket is its creation: history 1
	// keeps only the last, whose time is no earlier.
	if age := key.Created().Sub(st.CachedInfo().Created); age < ttl {
		t.Fatalf("the new lease was taken %v after its bucket was created, want at least the TTL %v", age, ttl)
	}
}

// firstLead returns a function that starts candidates on ns whose
// MayHaveLed says whether a lease was first taken (as the dispatcher's
// durable consumer records it) before the bucket created at created: a
// bucket created later may have lost one.
func firstLead(t *testing.T, ns *natstest.Server) func(id string, ttl time.Duration) *candidate {
	var mu sync.Mutex
	var ledAt time.Time
	mayHaveLed := func(_ context.Context, created time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		return !ledAt.IsZero() && ledAt.Before(created)
	}
	return func(id string, ttl time.Duration) *candidate {
		return campaignOn(t, ns.Connect(t), Config{ID: id, TTL: ttl, MayHaveLed: mayHaveLed}, func(lead bool) {
			mu.Lock()
			if lead && ledAt.IsZero() {
				ledAt = time.Now()
			}
			mu.Unlock()
		})
	}
}

// TestMixedTTLBucketLoss: dispatchers of different --lease-ttl (mid-way
// through a rolling change of it) lose their memory lease bucket with its
// server. The one that makes the bucket again waits the longest TTL it saw
// the lost bucket keep, not only its own: the old leader, with the longer
// lease, may count it valid until its next renewal finds the bucket gone.
func TestMixedTTLBucketLoss(t *testing.T) {
	ns := natstest.Start(t, nil)
	start := firstLead(t, ns)
	a := start("a", 4*time.Second)
	waitFor(t, 10*time.Second, "a to lead", a.e.Leader)
	b := start("b", 100*time.Millisecond)
	// The server restarts right after one of a's renewals: a counts its
	// lease valid for most of 3 s more, and renews 1 s later.
	js, _ := jetstream.New(ns.Connect(t))
	kv, err := js.KeyValue(context.Background(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(context.Background(), DefaultKey, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Updates():
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal seen")
	}
	_ = w.Stop()
	stop := watch(t, a, b)
	ns.Restart()
	waitFor(t, 30*time.Second, "a to step down", func() bool { return !a.e.Leader() })
	waitFor(t, 30*time.Second, "a or b to lead again", func() bool { return a.e.Leader() || b.e.Leader() })
	stop()
}
