package workerkit

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"fairdispatch/internal/natsdial"
)

// Connect delays between connection attempts: doubling from the first to the last.
const (
	connectFirstDelay = 100 * time.Millisecond
	connectMaxDelay   = 2 * time.Second
)

// Connect connects to the NATS server at url (a comma-separated list of
// servers) and waits for the first connection until ctx ends, retrying with
// backoff (100 ms doubling to 2 s), so that a worker or load generator
// started before its server (a Compose stack, a pod restart) waits for it
// instead of exiting. Once connected, the client reconnects forever. opts are
// applied after the defaults.
//
// It gives up at once, with an error that says why, where no retry can help:
// the server rejects the credentials or a certificate (a *natsdial.RefusedError,
// wrapping the NATS error, such as nats.ErrAuthorization), a file the options
// read cannot be read, or url does not parse. When ctx ends first, the error
// names the last attempt's. The error starts with "connect <url>" (the
// password redacted), without a package prefix: the program that calls it
// (the gateway, a worker, loadgen) names itself.
func Connect(ctx context.Context, url string, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := connectFirstDelay << min(attempts, 5)
			return min(d, connectMaxDelay)
		}),
	}, opts...)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = connectFirstDelay
	b.MaxInterval = connectMaxDelay
	b.Multiplier = 2
	b.RandomizationFactor = 0
	b.MaxElapsedTime = 0 // bounded by ctx only
	nc, _, err := natsdial.Dial(ctx, url, all, b, nil)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", natsdial.Redact(url), err)
	}
	return nc, nil
}

// ConnectWithin is Connect waiting at most wait (a program's
// --connect-timeout) for the first connection, or until ctx ends.
func ConnectWithin(ctx context.Context, url string, wait time.Duration, opts ...nats.Option) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return Connect(ctx, url, opts...)
}
