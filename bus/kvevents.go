package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/wire"
)

// KVMessage is one message of the KV event stream (docs/protocol.md, KV cache
// events), as read: parsing and applying it is the caller's business.
type KVMessage struct {
	Token     string    // the subject's last token: the worker id it claims to be from
	Data      []byte    // the JSON body
	Seq       uint64    // the stream sequence
	Published time.Time // when JetStream stored it
}

// ConsumeKV reads the KV event stream from its first message on, through an
// ordered consumer (ephemeral, in stream order, recreated by the client after
// a disconnection or a missed message), and calls fn with each message on the
// consumer's one goroutine. Reading from the start is how the dispatcher
// rebuilds its index after a restart; messages the stream's limits discarded
// show as gaps in the workers' event ids, which the index detects
// (docs/protocol.md, Resynchronisation). filter is the subject filter, e.g.
// "dispatch.kv.*". fn must not block for long. Call the returned stop to end
// the consumption; it waits for fn to return.
func ConsumeKV(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(KVMessage)) (stop func(), err error) {
	if js == nil || fn == nil || stream == "" || filter == "" {
		return nil, errors.New("bus: consume kv: nil stream, function or filter")
	}
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: consume kv %s: %w", stream, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		km := KVMessage{Token: m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:], Data: m.Data()}
		if md, err := m.Metadata(); err == nil {
			km.Seq, km.Published = md.Sequence.Stream, md.Timestamp
		}
		fn(km)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: consume kv %s: %w", stream, err)
	}
	return func() {
		cc.Stop()
		<-cc.Closed()
	}, nil
}

// RequestKVResync asks a worker to resynchronise one rank's cache state
// (docs/protocol.md, Resynchronisation): a core NATS publish of
// {"dp_rank": rank} to subject ("<prefix>.kvsync.<worker_id>"). It is best
// effort: the caller repeats it while the rank stays stale.
func RequestKVResync(nc *nats.Conn, subject string, rank int32) error {
	b, err := json.Marshal(wire.KVResync{Rank: rank})
	if err != nil {
		return fmt.Errorf("bus: kv resync: %w", err)
	}
	if err := nc.Publish(subject, b); err != nil {
		return fmt.Errorf("bus: kv resync %s: %w", subject, err)
	}
	return nil
}
