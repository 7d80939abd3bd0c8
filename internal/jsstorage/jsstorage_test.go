package jsstorage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/internal/jsstorage"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// TestRefusedReadsTheServersErrors: the refusals a real nats-server sends (a
// stream at its own message and byte limits with discard new, and the
// server's store full) are recognised with the server's description, also
// wrapped; other errors, among them the same error code with another
// description, are not.
func TestRefusedReadsTheServersErrors(t *testing.T) {
	ns := natstest.Start(t, func(o *server.Options) { o.JetStreamMaxStore = 64 << 10 })
	nc := natstest.Connect(t, ns.Running())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []jetstream.StreamConfig{
		{Name: "MSGS", Subjects: []string{"msgs"}, MaxMsgs: 1, Discard: jetstream.DiscardNew},
		{Name: "BYTES", Subjects: []string{"bytes"}, MaxBytes: 200, Discard: jetstream.DiscardNew},
		{Name: "ALL", Subjects: []string{"all"}},
	} {
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	refusal := func(subject string, body []byte) error {
		t.Helper()
		for range 1000 {
			if _, err := js.Publish(ctx, subject, body); err != nil {
				return err
			}
		}
		t.Fatalf("%s: 1000 publishes stored, none refused", subject)
		return nil
	}
	for _, c := range []struct {
		subject string
		body    []byte
		want    string
	}{
		{"msgs", []byte("x"), wire.RefusalMaxMsgs},
		{"bytes", []byte("0123456789"), wire.RefusalMaxBytes},
		{"all", make([]byte, 1024), wire.RefusalInsufficientResources},
	} {
		err := refusal(c.subject, c.body)
		reason, ok := jsstorage.Refused(fmt.Errorf("wrapped: %w", err))
		if !ok || reason != c.want {
			t.Errorf("%s: Refused(%v) = %q, %v; want %q, true", c.subject, err, reason, ok, c.want)
		}
	}
	for _, err := range []error{
		nil, errors.New("maximum bytes exceeded"), jetstream.ErrStreamNotFound, jetstream.ErrStreamMessageExceedsMaximum,
		&jetstream.APIError{ErrorCode: wire.JSErrCodeStoreFailed, Description: "message too large", Code: 503},
	} {
		if reason, ok := jsstorage.Refused(err); ok {
			t.Errorf("Refused(%v) = %q, true; want false", err, reason)
		}
	}
}
