package gateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/natstest"
)

// TestHealthWithoutLeaseBucket: where dispatchers run without leader
// election, a pool is reachable while its consumer has a pull waiting or
// holds messages delivered and unacknowledged (a dispatcher at its
// --max-held opens no pull), and unreachable when it has neither.
func TestHealthWithoutLeaseBucket(t *testing.T) {
	t.Parallel()
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := natstest.RequestStream(t, js, "dispatch")
	c := natstest.PullConsumer(t, st, time.Minute)
	h, err := NewHealth(nc, []string{"dispatch"})
	if err != nil {
		t.Fatal(err)
	}
	check := func() error {
		h.CheckAll(context.Background())
		return h.Check("dispatch")
	}
	if err := check(); !errors.Is(err, ErrNoDispatcher) {
		t.Fatalf("no pull, nothing held: %v, want ErrNoDispatcher", err)
	}
	if _, err := js.Publish(context.Background(), "dispatch.req.c", []byte("x")); err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	for m := range batch.Messages() {
		held = m
	}
	if held == nil {
		t.Fatal("nothing fetched")
	}
	if err := check(); err != nil {
		t.Fatalf("no pull, one message held: %v, want reachable", err)
	}
	if err := held.DoubleAck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := check(); !errors.Is(err, ErrNoDispatcher) {
		t.Fatalf("no pull, nothing held after the ack: %v, want ErrNoDispatcher", err)
	}
	go func() { _, _ = c.Fetch(1, jetstream.FetchMaxWait(30*time.Second)) }() // a pull left waiting
	natstest.Eventually(t, 10*time.Second, func() bool { return check() == nil }, "reachable with a pull waiting")
}
