package bus

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// SubscribeCancel subscribes to "<prefix>.cancel", where producers cancel
// requests (docs/protocol.md, Cancellation), and calls fn with each raw body
// on the subscription's one goroutine. fn must not block for long; parsing is
// the caller's business. Unsubscribe the returned subscription to stop.
func SubscribeCancel(nc *nats.Conn, prefix string, fn func(data []byte)) (*nats.Subscription, error) {
	subj, err := NewSubjects(prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe cancel: %w", err)
	}
	if nc == nil || fn == nil {
		return nil, errors.New("bus: subscribe cancel: nil connection or function")
	}
	sub, err := nc.Subscribe(subj.Cancel(), func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", subj.Cancel(), err)
	}
	return sub, nil
}

// PublishCancel publishes c on "<prefix>.cancel.<worker>" (core NATS, fire
// and forget): the dispatcher's word to the worker running the request.
func PublishCancel(nc *nats.Conn, subj Subjects, worker string, c wire.Cancel) error {
	if !validToken(worker) {
		return fmt.Errorf("%w: %w: worker id %q", ErrWorkerFault, ErrInvalidSubject, worker)
	}
	b, err := wire.MarshalCancel(c)
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	if err := nc.Publish(subj.CancelWorker(worker), b); err != nil {
		return fmt.Errorf("bus: cancel %s to %s: %w", c.RequestID, worker, publishFault(err))
	}
	return nil
}
