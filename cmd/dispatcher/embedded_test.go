package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestEmbeddedServerSyncs: the embedded nats-server syncs JetStream writes
// before acknowledging them by default (docs/deployment.md, Durability), and
// every --nats-sync period otherwise.
func TestEmbeddedServerSyncs(t *testing.T) {
	for _, c := range []struct {
		args         []string
		wantAlways   bool
		wantInterval time.Duration
	}{
		{nil, true, 0},
		{[]string{"--nats-sync", "250ms"}, false, 250 * time.Millisecond},
		{[]string{"--nats-sync", "always"}, true, 0},
	} {
		s, err := parseSettings(append(c.args, "--nats-listen", "127.0.0.1:-1", "--data-dir", t.TempDir()), env(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := embeddedServer(s, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		jsc := srv.JetStreamConfig()
		srv.Shutdown()
		srv.WaitForShutdown()
		if jsc == nil || jsc.SyncAlways != c.wantAlways || (!c.wantAlways && jsc.SyncInterval != c.wantInterval) {
			t.Errorf("%v: got JetStream config %+v, want sync always %v, interval %v", c.args, jsc, c.wantAlways, c.wantInterval)
		}
	}
	if _, err := parseSettings([]string{"--nats-sync", "5ms"}, env(nil), &bytes.Buffer{}); err == nil {
		t.Error("--nats-sync 5ms accepted, want an error naming the flag")
	}
}
