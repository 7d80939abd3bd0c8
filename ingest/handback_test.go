package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestHandBackSurvivesServerRestart: messages handed back through HandBacks,
// once Wait has returned, are redelivered at once by a server restarted on the
// same store (the embedded server's SIGTERM path), not after the ack wait (an
// hour here). A plain NAK only queues the message in the stopped server's memory.
func TestHandBackSurvivesServerRestart(t *testing.T) {
	const n = 20
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	srv := startServer(t, opts)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: "DISPATCH_REQ", Subjects: []string{"dispatch.req.*"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx(t), jetstream.ConsumerConfig{Durable: "dispatcher", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := js.Publish(ctx(t), "dispatch.req.a", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	hb, err := NewHandBacks(nc)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		if err := hb.Nak(m.Reply()); err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != n {
		t.Fatalf("fetched %d, want %d", got, n)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left, err := hb.Wait(wctx); err != nil {
		t.Fatalf("Wait: %v (%d unconfirmed)", err, left)
	}
	if hb.Sent() != n {
		t.Fatalf("Sent() = %d, want %d", hb.Sent(), n)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	srv = startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	nc2, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	cons2, err := js2.Consumer(ctx(t), "DISPATCH_REQ", "dispatcher")
	if err != nil {
		t.Fatal(err)
	}
	// The ack wait is an hour: anything redelivered within the deadline was handed back.
	redelivered := 0
	deadline := time.Now().Add(20 * time.Second)
	for redelivered < n && time.Now().Before(deadline) {
		b, err := cons2.Fetch(n-redelivered, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			_ = m.Ack()
			redelivered++
		}
	}
	if redelivered != n {
		t.Fatalf("after the restart %d of %d handed-back messages were redelivered, want all (ack wait 1h)", redelivered, n)
	}
}

func startServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}
