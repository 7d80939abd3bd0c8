package leader

import (
	"context"
	"strings"
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
	js, _ := jetstream.New(nc)
	e, err := New(context.Background(), js, Config{ID: id, TTL: ttl, Storage: jetstream.MemoryStorage}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		e.Run(ctx, func(bool) { c.events.Add(1) })
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
	// 2 s: a's renewals (every ttl/3) have 1.5 s of slack on a loaded machine
	// before it would step down during the 2*ttl below.
	ttl := 2 * time.Second
	a, b, stop := leaderAndStandby(t, ttl)
	time.Sleep(2 * ttl) // b campaigns several times meanwhile; the behaviour under test is that it does not win
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
	ttl := 600 * time.Millisecond
	a, b, stop := leaderAndStandby(t, ttl)
	a.nc.Close() // a's renewals now fail: it must step down on its own clock
	// watch checks the safety (never two leaders); the deadline here is only
	// generous, not a measure of speed.
	waitFor(t, 10*time.Second, "a to step down", func() bool { return !a.e.Leader() })
	waitFor(t, 20*time.Second, "b to lead", b.e.Leader)
	stop()
	if a.events.Load() != 2 {
		t.Errorf("a saw %d role changes, want 2 (lead, step down)", a.events.Load())
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
// per prefix) lead at the same time, each in its own bucket; the longest
// prefix naming accepts makes a bucket JetStream stores on file.
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
		e, err := New(context.Background(), js, Config{Bucket: n.LeaderBucket(), ID: "d-" + prefix[:4], TTL: time.Second, Storage: jetstream.FileStorage}, zerolog.Nop())
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
