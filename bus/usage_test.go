package bus

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReadStreamAndAccount: a stream's bytes, messages and own limits (none:
// -1 or 0), and the account's use and limits, per storage type.
func TestReadStreamAndAccount(t *testing.T) {
	ts := startServer(t, nil)
	if err := ts.Running().GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{
		"": {MaxMemory: 1 << 20, MaxStore: 8 << 20, MaxStreams: -1, MaxConsumers: -1},
	}); err != nil {
		t.Fatal(err)
	}
	js := newJS(t, connect(t, ts))
	ctx := ctxT(t)
	if err := EnsureStreams(ctx, js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, DLQStream)
	cfg.MaxMsgs = 10
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "dispatch.dlq.x", make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	u, err := ReadStream(ctx, js, DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	if u.Msgs != 3 || u.Bytes < 300 || u.MaxMsgs != 10 || u.MaxBytes > 0 || !u.DiscardNew {
		t.Errorf("DLQ use %+v, want 3 messages of over 300 bytes, max 10 messages, no byte limit, discard new", u)
	}
	if _, err := ReadStream(ctx, js, "NOPE"); err == nil {
		t.Error("ReadStream of a missing stream: no error")
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "m", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	a, err := ReadAccount(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.FileBytes < 300 || a.MemoryBytes < 64 || a.FileMax != 8<<20 || a.MemoryMax != 1<<20 {
		t.Errorf("account use %+v, want over 300 file bytes, over 64 memory bytes, limits 8 MiB and 1 MiB", a)
	}
}
