package workerkit

import (
	"context"
	"errors"
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

// ErrClosed is the cause of a context from UntilClosed whose connection was
// closed for good.
var ErrClosed = errors.New("nats connection closed for good")

// UntilClosed returns a context that ends with ctx or when the server closes
// nc for good, and a function that returns, once the context has ended, an
// error wrapping ErrClosed and the connection's last error if that close
// ended it (nil if ctx did). nats.go reconnects after a lost connection, but
// closes the connection for good when the server refuses the client's
// credentials twice in a row on reconnecting (revoked or rotated) or ends it
// for a protocol violation: a program that runs on the context stops and
// exits non-zero with that error, so that its supervisor restarts it, instead
// of staying up with a connection that can never carry a request again. A
// close without an error (the program's own Close or Drain) does not end the
// context. It sets nc's closed handler, replacing one set by an option.
func UntilClosed(ctx context.Context, nc *nats.Conn) (context.Context, func() error) {
	cctx, cancel := context.WithCancelCause(ctx)
	closedBy := func(c *nats.Conn) {
		// nats.go leaves a transient error (a slow consumer, a refused
		// subscription) as the last error too: a close after one is still
		// the program's own.
		if err := c.LastError(); err != nil && !errors.Is(err, nats.ErrSlowConsumer) &&
			!errors.Is(err, nats.ErrPermissionViolation) && !errors.Is(err, nats.ErrMaxSubscriptionsExceeded) {
			cancel(fmt.Errorf("%w: %w", ErrClosed, err))
		}
	}
	nc.SetClosedHandler(closedBy)
	if nc.IsClosed() { // closed before the handler was set
		closedBy(nc)
	}
	return cctx, func() error {
		if err := context.Cause(cctx); errors.Is(err, ErrClosed) {
			return err
		}
		return nil
	}
}
