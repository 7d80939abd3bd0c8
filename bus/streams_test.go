package bus

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctxT(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

func TestEnsureStreamsCreatesBoth(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	for _, c := range []struct {
		name      string
		subjects  []string
		retention jetstream.RetentionPolicy
	}{
		{ReqStream, []string{"dispatch.req.*"}, jetstream.WorkQueuePolicy},
		{DLQStream, []string{"dispatch.dlq.*"}, jetstream.LimitsPolicy},
	} {
		cfg := streamConfig(t, js, c.name)
		if !slices.Equal(cfg.Subjects, c.subjects) {
			t.Errorf("%s subjects: got %v, want %v", c.name, cfg.Subjects, c.subjects)
		}
		if cfg.Retention != c.retention {
			t.Errorf("%s retention: got %v, want %v", c.name, cfg.Retention, c.retention)
		}
		if cfg.Storage != jetstream.FileStorage {
			t.Errorf("%s storage: got %v, want file", c.name, cfg.Storage)
		}
		if cfg.Replicas != 1 {
			t.Errorf("%s replicas: got %d, want 1", c.name, cfg.Replicas)
		}
		if cfg.Duplicates != DefaultDuplicateWindow {
			t.Errorf("%s duplicates: got %v, want %v", c.name, cfg.Duplicates, DefaultDuplicateWindow)
		}
	}
}

func TestEnsureStreamsIdempotentAndUpdates(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	c := StreamConfig{Prefix: "acme.d", Storage: jetstream.MemoryStorage, DuplicateWindow: time.Minute}
	if err := EnsureStreams(ctx, js, c); err != nil {
		t.Fatalf("first EnsureStreams: %v", err)
	}
	// A request stored in between survives the second call.
	if _, err := js.Publish(ctx, "acme.d.req.premium", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	// An operator's own setting survives updates.
	dlq := streamConfig(t, js, DLQStream)
	dlq.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, dlq); err != nil {
		t.Fatalf("operator update: %v", err)
	}
	if err := EnsureStreams(ctx, js, c); err != nil {
		t.Fatalf("second EnsureStreams: %v", err)
	}
	c.DuplicateWindow = 5 * time.Minute
	if err := EnsureStreams(ctx, js, c); err != nil {
		t.Fatalf("EnsureStreams with a new duplicate window: %v", err)
	}
	for _, name := range []string{ReqStream, DLQStream} {
		cfg := streamConfig(t, js, name)
		if cfg.Duplicates != 5*time.Minute {
			t.Errorf("%s duplicates: got %v, want 5m", name, cfg.Duplicates)
		}
		if cfg.Storage != jetstream.MemoryStorage {
			t.Errorf("%s storage: got %v, want memory", name, cfg.Storage)
		}
	}
	if got := streamConfig(t, js, DLQStream).MaxAge; got != time.Hour {
		t.Errorf("DLQ max age: got %v, want 1h (kept)", got)
	}
	if got := streamConfig(t, js, ReqStream).Subjects; !slices.Equal(got, []string{"acme.d.req.*"}) {
		t.Errorf("req subjects: got %v", got)
	}
	s, err := js.Stream(ctx, ReqStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 1 {
		t.Errorf("req stream messages: got %d, want 1", got)
	}
}

func TestEnsureStreamsStorageChangeFails(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	if err := EnsureStreams(ctx, js, StreamConfig{Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	err := EnsureStreams(ctx, js, StreamConfig{Storage: jetstream.MemoryStorage})
	if !errors.Is(err, ErrStreamConflict) {
		t.Fatalf("got %v, want ErrStreamConflict", err)
	}
	if !strings.Contains(err.Error(), ReqStream) || !strings.Contains(err.Error(), "storage") {
		t.Errorf("error %q should name the stream and storage", err)
	}
}

func TestEnsureStreamsRejectsBadConfig(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	for _, c := range []StreamConfig{
		{Prefix: "a.*"},
		{Replicas: 7},
		{DuplicateWindow: -time.Second},
	} {
		if err := EnsureStreams(ctxT(t), js, c); err == nil {
			t.Errorf("EnsureStreams(%+v): got nil error", c)
		}
	}
}

// TestEnsureStreamsRightAfterRestart calls EnsureStreams as soon as the
// connection is back: the first JetStream requests after a server start can
// go unanswered and must be retried, not waited on until the deadline.
func TestEnsureStreamsRightAfterRestart(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	js := newJS(t, nc)
	ts.Restart()
	waitFor(t, "reconnect", func() bool { return nc.IsConnected() })
	if err := EnsureStreams(ctxT(t), js, StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	if got := streamConfig(t, js, DLQStream).Retention; got != jetstream.LimitsPolicy {
		t.Errorf("DLQ retention: got %v", got)
	}
}
