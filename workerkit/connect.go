package workerkit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect delays between connection attempts: doubling from the first to the last.
const (
	connectFirstDelay = 100 * time.Millisecond
	connectMaxDelay   = 2 * time.Second
)

// Connect connects to the NATS server at url and waits for the first
// connection until ctx ends, retrying with backoff (100 ms doubling to 2 s), so
// that a worker or load generator started before its server (a Compose stack,
// a pod restart) waits for it instead of exiting. Once connected, the client
// reconnects forever. opts are applied after the defaults. An error that no
// retry can fix (a malformed URL) is returned at once.
func Connect(ctx context.Context, url string, opts ...nats.Option) (*nats.Conn, error) {
	up := make(chan struct{})
	var once sync.Once
	signal := func(*nats.Conn) { once.Do(func() { close(up) }) }
	all := append([]nats.Option{
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := connectFirstDelay << min(attempts, 5)
			return min(d, connectMaxDelay)
		}),
		nats.ConnectHandler(signal),
		nats.ReconnectHandler(signal),
	}, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, fmt.Errorf("worker: connect %s: %w", url, err)
	}
	if nc.IsConnected() {
		return nc, nil
	}
	select {
	case <-up:
		return nc, nil
	case <-ctx.Done():
		nc.Close()
		return nil, fmt.Errorf("worker: connect %s: %w", url, ctx.Err())
	}
}

// ConnectWithin is Connect waiting at most wait (a program's
// --connect-timeout) for the first connection, or until ctx ends.
func ConnectWithin(ctx context.Context, url string, wait time.Duration, opts ...nats.Option) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return Connect(ctx, url, opts...)
}
