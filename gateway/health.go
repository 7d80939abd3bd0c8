package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/naming"
)

// Health watches whether each pool's dispatcher can be reached, so that a
// request to a pool without one is refused at once (503) instead of waiting
// in a stream nobody reads. A pool is reachable while the gateway is
// connected to NATS, the pool's request stream exists, and a dispatcher
// leads it: its leader lease key (docs/protocol.md, Names: the leader lease
// bucket, which expires a dead leader's key within its TTL) is present; or,
// where there is no lease bucket (dispatchers run with
// --leader-election=false), the stream's durable consumer has a pull
// waiting or messages delivered and not yet acknowledged: a dispatcher at
// its --max-held, or between two pulls, has no pull open but holds
// messages.
type Health struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names map[string]naming.Names

	mu     sync.Mutex
	status map[string]error
}

// ErrNoDispatcher says that no dispatcher leads a pool.
var ErrNoDispatcher = errors.New("no dispatcher leads this pool")

// NewHealth returns a Health of the pools under prefixes; every pool counts
// as unreachable until its first check.
func NewHealth(nc *nats.Conn, prefixes []string) (*Health, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	h := &Health{nc: nc, js: js, names: map[string]naming.Names{}, status: map[string]error{}}
	for _, p := range prefixes {
		n, err := naming.New(p)
		if err != nil {
			return nil, err
		}
		h.names[p] = n
		h.status[p] = errors.New("not checked yet")
	}
	return h, nil
}

// Run checks every pool now and then every interval until ctx ends.
func (h *Health) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		h.CheckAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckAll checks every pool once.
func (h *Health) CheckAll(ctx context.Context) {
	for p, n := range h.names {
		err := h.check(ctx, n)
		h.mu.Lock()
		h.status[p] = err
		h.mu.Unlock()
	}
}

func (h *Health) check(ctx context.Context, n naming.Names) error {
	if !h.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := h.js.Stream(ctx, n.ReqStream())
	if err != nil {
		return fmt.Errorf("stream %s: %w", n.ReqStream(), err)
	}
	if kv, err := h.js.KeyValue(ctx, n.LeaderBucket()); err == nil {
		// Dispatchers that elect a leader: the lease alone says. (A dead
		// dispatcher's pulls stay waiting on the server until they expire.)
		if _, err := kv.Get(ctx, "dispatcher"); err == nil {
			return nil
		}
		return ErrNoDispatcher
	}
	if c, err := st.Consumer(ctx, n.Durable()); err == nil {
		if info, err := c.Info(ctx); err == nil && (info.NumWaiting > 0 || info.NumAckPending > 0) {
			return nil
		}
	}
	return ErrNoDispatcher
}

// Check returns the last check's verdict on the pool of prefix: nil when
// reachable. While disconnected from NATS it says so at once.
func (h *Health) Check(prefix string) error {
	if !h.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err, ok := h.status[prefix]
	if !ok {
		return fmt.Errorf("unknown pool %s", prefix)
	}
	return err
}

// Ready returns nil when every pool is reachable, else the first problem.
func (h *Health) Ready() error {
	for p := range h.names {
		if err := h.Check(p); err != nil {
			return fmt.Errorf("pool %s: %w", p, err)
		}
	}
	return nil
}
