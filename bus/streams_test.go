package bus

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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
		{"DISPATCH_KV", []string{"dispatch.kv.*"}, jetstream.LimitsPolicy},
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
	const reqStream, dlqStream = "ACME_D_REQ", "ACME_D_DLQ" // the streams of prefix acme.d
	if err := EnsureStreams(ctx, js, c); err != nil {
		t.Fatalf("first EnsureStreams: %v", err)
	}
	// A request stored in between survives the second call.
	if _, err := js.Publish(ctx, "acme.d.req.premium", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	// An operator's own setting survives updates.
	dlq := streamConfig(t, js, dlqStream)
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
	for _, name := range []string{reqStream, dlqStream} {
		cfg := streamConfig(t, js, name)
		if cfg.Duplicates != 5*time.Minute {
			t.Errorf("%s duplicates: got %v, want 5m", name, cfg.Duplicates)
		}
		if cfg.Storage != jetstream.MemoryStorage {
			t.Errorf("%s storage: got %v, want memory", name, cfg.Storage)
		}
	}
	if got := streamConfig(t, js, dlqStream).MaxAge; got != time.Hour {
		t.Errorf("DLQ max age: got %v, want 1h (kept)", got)
	}
	if got := streamConfig(t, js, reqStream).Subjects; !slices.Equal(got, []string{"acme.d.req.*"}) {
		t.Errorf("req subjects: got %v", got)
	}
	s, err := js.Stream(ctx, reqStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 1 {
		t.Errorf("req stream messages: got %d, want 1", got)
	}
}

// TestEnsureStreamsPerPrefix: two prefixes on one account get their own
// streams, and the default prefix's names are untouched.
func TestEnsureStreamsPerPrefix(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	for _, p := range []string{"llama", "qwen", ""} {
		if err := EnsureStreams(ctx, js, StreamConfig{Prefix: p, Storage: jetstream.MemoryStorage}); err != nil {
			t.Fatalf("EnsureStreams(%q): %v", p, err)
		}
	}
	for _, c := range []struct{ name, subject string }{
		{"LLAMA_REQ", "llama.req.*"}, {"LLAMA_DLQ", "llama.dlq.*"},
		{"QWEN_REQ", "qwen.req.*"}, {"QWEN_DLQ", "qwen.dlq.*"},
		{"DISPATCH_REQ", "dispatch.req.*"}, {"DISPATCH_DLQ", "dispatch.dlq.*"},
	} {
		if got := streamConfig(t, js, c.name).Subjects; !slices.Equal(got, []string{c.subject}) {
			t.Errorf("%s subjects: got %v, want [%s]", c.name, got, c.subject)
		}
	}
	// Ensuring one prefix again leaves the others alone.
	if err := EnsureStreams(ctx, js, StreamConfig{Prefix: "llama", Storage: jetstream.MemoryStorage, Replicas: 1, DuplicateWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js, "QWEN_REQ").Duplicates; got != DefaultDuplicateWindow {
		t.Errorf("QWEN_REQ duplicate window: got %v, want %v (untouched)", got, DefaultDuplicateWindow)
	}
}

// TestEnsureStreamsRefusesAnotherPrefixsStream: "a.b" and "a_b" name the
// same streams; the second deployment must not take the first one's subjects
// (and with them its requests).
func TestEnsureStreamsRefusesAnotherPrefixsStream(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	if err := EnsureStreams(ctx, js, StreamConfig{Prefix: "a.b", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	err := EnsureStreams(ctx, js, StreamConfig{Prefix: "a_b", Storage: jetstream.MemoryStorage})
	if !errors.Is(err, ErrStreamConflict) || !strings.Contains(err.Error(), "A_B_REQ") || !strings.Contains(err.Error(), "a.b.req.*") {
		t.Fatalf("got %v, want ErrStreamConflict naming A_B_REQ and a.b.req.*", err)
	}
	if got := streamConfig(t, js, "A_B_REQ").Subjects; !slices.Equal(got, []string{"a.b.req.*"}) {
		t.Errorf("A_B_REQ subjects: got %v, want [a.b.req.*] (kept)", got)
	}
}

// TestEnsureStreamsOldLayoutOverlap: an earlier release kept prefix llama's
// requests in DISPATCH_REQ; creating LLAMA_REQ then fails, with a hint.
func TestEnsureStreamsOldLayoutOverlap(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DISPATCH_REQ", Subjects: []string{"llama.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	err := EnsureStreams(ctx, js, StreamConfig{Prefix: "llama", Storage: jetstream.MemoryStorage})
	if err == nil || !strings.Contains(err.Error(), "LLAMA_REQ") || !strings.Contains(err.Error(), "DISPATCH_REQ") {
		t.Fatalf("got %v, want an error naming LLAMA_REQ and the old DISPATCH_REQ", err)
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
		{Prefix: "a/b"},
		{Prefix: "a+b"},
		{Replicas: 7},
		{DuplicateWindow: -time.Second},
		{KVMaxAge: -time.Second},
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

// TestEnsureStreamsKVMaxAge: the KV event stream is created with the
// configured max age (DefaultKVMaxAge by default), and an operator's own max
// age on an existing stream is kept.
func TestEnsureStreamsKVMaxAge(t *testing.T) {
	js := withStreams(t, nil)
	if got := streamConfig(t, js, "DISPATCH_KV").MaxAge; got != DefaultKVMaxAge {
		t.Fatalf("max age %v, want %v", got, DefaultKVMaxAge)
	}
	cfg := streamConfig(t, js, "DISPATCH_KV")
	cfg.MaxAge = 10 * time.Minute
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctxT(t), js, StreamConfig{KVMaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js, "DISPATCH_KV").MaxAge; got != 10*time.Minute {
		t.Fatalf("max age %v after EnsureStreams, want the operator's 10m kept", got)
	}
	if err := EnsureStreams(ctxT(t), js, StreamConfig{Prefix: "p", KVMaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := streamConfig(t, js, "P_KV"); got.MaxAge != 2*time.Hour || !slices.Equal(got.Subjects, []string{"p.kv.*"}) {
		t.Fatalf("P_KV: max age %v subjects %v, want 2h and p.kv.*", got.MaxAge, got.Subjects)
	}
}

// TestEnsureStreamsDiscardNew: the request and dead-letter streams are
// created with discard new, the KV event stream with discard old. An existing
// request or dead-letter stream with discard old (an older dispatcher's, or an
// operator's) is set to discard new with a warning naming it and what it
// would lose, keeping its limits; the KV stream keeps an operator's discard
// policy (here new).
func TestEnsureStreamsDiscardNew(t *testing.T) {
	ts := startServer(t, nil)
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	if err := EnsureStreams(ctx, js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]jetstream.DiscardPolicy{ReqStream: jetstream.DiscardNew, DLQStream: jetstream.DiscardNew, "DISPATCH_KV": jetstream.DiscardOld} {
		if got := streamConfig(t, js, name).Discard; got != want {
			t.Errorf("%s created with discard %v, want %v", name, got, want)
		}
	}
	for name, d := range map[string]jetstream.DiscardPolicy{ReqStream: jetstream.DiscardOld, DLQStream: jetstream.DiscardOld, "DISPATCH_KV": jetstream.DiscardNew} {
		cfg := streamConfig(t, js, name)
		cfg.Discard, cfg.MaxBytes = d, 1<<20
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	var logs strings.Builder
	if err := EnsureStreams(ctx, js, StreamConfig{Log: zerolog.New(&logs)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ReqStream, DLQStream, "DISPATCH_KV"} {
		cfg := streamConfig(t, js, name)
		if cfg.Discard != jetstream.DiscardNew || cfg.MaxBytes != 1<<20 {
			t.Errorf("%s: discard %v, max bytes %d; want new, 1 MiB kept", name, cfg.Discard, cfg.MaxBytes)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0]+lines[1], `"stream":"DISPATCH_REQ"`) || !strings.Contains(lines[0]+lines[1], `"stream":"DISPATCH_DLQ"`) ||
		!strings.Contains(logs.String(), "data-loss setting") || !strings.Contains(logs.String(), "the oldest requests") {
		t.Errorf("warnings: got\n%s\nwant one for DISPATCH_REQ and one for DISPATCH_DLQ, saying what discard old loses", logs.String())
	}
	logs.Reset()
	if err := EnsureStreams(ctx, js, StreamConfig{Log: zerolog.New(&logs)}); err != nil || logs.Len() != 0 {
		t.Errorf("EnsureStreams again: %v, logged %q; want nothing", err, logs.String())
	}
}
