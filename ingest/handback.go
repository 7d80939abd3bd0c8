package ingest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// nakNow is the hand-back acknowledgement: a NAK with a delay of 1 ns. A plain
// NAK only puts the message on the consumer's in-memory redelivery queue, which
// a server that stops (the embedded one, on SIGTERM) loses: after its restart
// the message waits out the whole ack wait. A NAK with a delay instead moves
// the message's stored delivery time back by the ack wait, so the server
// redelivers it about 10 ms later if it keeps running, and at once (within its
// 0.5-1.5 s start-up check of pending messages) if it restarts
// (docs/decisions.md, Operations: hand-back is confirmed).
var nakNow = []byte(`-NAK {"delay":1}`)

// HandBacks sends hand-back NAKs with a reply
// subject, so that the server confirms each once it has processed it, and
// counts the confirmations: Wait returns once every NAK sent is confirmed.
// A HandBacks is safe for concurrent use.
type HandBacks struct {
	nc        *nats.Conn
	inbox     string
	sent      atomic.Uint64
	confirmed atomic.Uint64
	signal    chan struct{} // cap 1: a confirmation arrived
}

// NewHandBacks subscribes to a new inbox on nc for the confirmations; the
// subscription ends with the connection.
func NewHandBacks(nc *nats.Conn) (*HandBacks, error) {
	h := &HandBacks{nc: nc, inbox: nc.NewInbox(), signal: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(h.inbox, func(*nats.Msg) {
		h.confirmed.Add(1)
		select {
		case h.signal <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: hand-back confirmations: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1) // a mass hand-back confirms each message
	return h, nil
}

// Sent returns how many hand-back NAKs were sent.
func (h *HandBacks) Sent() uint64 { return h.sent.Load() }

// Wait returns once the server has confirmed every hand-back sent so far, or
// when ctx ends; it then returns how many are unconfirmed and ctx's error.
func (h *HandBacks) Wait(ctx context.Context) (uint64, error) {
	for {
		sent, conf := h.sent.Load(), h.confirmed.Load()
		if conf >= sent {
			return 0, nil
		}
		select {
		case <-h.signal:
		case <-ctx.Done():
			return sent - h.confirmed.Load(), fmt.Errorf("ingest: hand-back confirmations: %w", ctx.Err())
		}
	}
}

// Nak hands back the message whose acknowledgement subject is reply, for
// redelivery at once (nakNow), with a reply subject so that the server
// confirms it.
func (h *HandBacks) Nak(reply string) error {
	if reply == "" {
		return errNoReply
	}
	if err := h.nc.PublishRequest(reply, h.inbox, nakNow); err != nil {
		return fmt.Errorf("ingest: hand back: %w", err)
	}
	h.sent.Add(1)
	return nil
}
