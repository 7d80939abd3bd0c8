package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natsdial"
)

// Defaults of Options.
const (
	// DefaultReconnectWait is the pause between reconnect attempts when
	// Options.ReconnectWait is 0.
	DefaultReconnectWait = time.Second
	// DefaultPingInterval is how often the client pings the server when
	// Options.PingInterval is 0. Two unanswered pings mark the connection stale,
	// so a silent server is noticed within about twice this interval.
	DefaultPingInterval = 10 * time.Second
)

// ErrAuth reports that the server rejected the connection's credentials. It is
// permanent: Connect does not retry it.
var ErrAuth = errors.New("bus: nats rejected the credentials")

// Options says how to connect to NATS (docs/config.md, Flags and environment). The zero value connects to
// nats.DefaultURL without credentials.
type Options struct {
	// URL is a comma-separated list of server URLs; "" means nats.DefaultURL.
	URL string
	// Name is the connection name shown by the server's monitoring.
	Name string

	// CredsFile is a user JWT + nkey seed file (--nats-creds).
	CredsFile string
	// NKeyFile is an nkey seed file (--nats-nkey).
	NKeyFile string
	// User and Password authenticate with a user name and password.
	User, Password string

	// InboxPrefix replaces "_INBOX" as the prefix of the connection's reply
	// subjects (handshake answers, JetStream API answers, pulled messages);
	// "" keeps _INBOX. With one per dispatcher, NATS permissions can keep
	// pools on one account from reading each other's inboxes
	// (docs/security.md). A literal subject.
	InboxPrefix string

	// TLSCA is a PEM file of CAs that verify the server.
	TLSCA string
	// TLSCert and TLSKey are the client's certificate and key (PEM files), both or neither.
	TLSCert, TLSKey string

	// ReconnectWait is the pause between reconnect attempts to the same
	// server, before jitter; 0 means DefaultReconnectWait.
	ReconnectWait time.Duration
	// PingInterval is the client's ping interval; 0 means DefaultPingInterval.
	PingInterval time.Duration

	// OnDisconnect is called when the connection is lost. It runs on the NATS
	// client's callback goroutine and must not block.
	OnDisconnect func()
	// OnReconnect is called when the connection is back. It runs on the NATS
	// client's callback goroutine and must not block.
	OnReconnect func()
	// OnClosed is called when the connection is closed for good: by Close,
	// or by the client after an error it does not reconnect from (a server
	// that refused a protocol line as too long, for one), with that error
	// (nil after Close). It runs on the NATS client's callback goroutine and
	// must not block.
	OnClosed func(err error)
	// OnAsyncError is called with each error the server reports
	// asynchronously (a permissions violation, a slow consumer), after it is
	// logged. It runs on the NATS client's callback goroutine and must not
	// block.
	OnAsyncError func(err error)
}

// Connect connects to NATS. The first connection is retried with exponential
// backoff until it succeeds or ctx ends; a rejection of the credentials
// (ErrAuth, wrapping the NATS error) or an unreadable credentials or TLS file is
// permanent and returned at once; so is a server that closes
// natsdial.ClosedAfterTLSAttempts attempts in a row right after the TLS handshake, as one
// refusing the client certificate may. The connection then reconnects forever
// (nats.MaxReconnects(-1)) with jittered waits, and every state change is logged
// on log with component "bus": connected, disconnected (with its error),
// reconnected, closed, and asynchronous errors such as slow consumers or
// permission violations. A server older than MinServerVersion is refused at
// once with an error wrapping ErrServerTooOld that names both versions.
func Connect(ctx context.Context, o Options, log zerolog.Logger) (*nats.Conn, error) {
	log = log.With().Str("component", "bus").Logger()
	opts, err := o.natsOptions(log)
	if err != nil {
		return nil, err
	}
	servers := o.URL
	if servers == "" {
		servers = nats.DefaultURL
	}
	url := natsdial.Redact(servers) // for logs and errors

	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0 // bounded by ctx only
	nc, attempt, err := natsdial.Dial(ctx, servers, opts, b, func(attempt int, err error) {
		log.Warn().Err(err).Int("attempt", attempt).Str("url", url).Msg("nats connect failed, retrying")
	})
	var refused *natsdial.RefusedError
	switch {
	case errors.As(err, &refused):
		return nil, fmt.Errorf("%w: connect %s: %w", ErrAuth, url, err)
	case err != nil:
		return nil, fmt.Errorf("bus: connect %s: %w", url, err)
	}
	if err := CheckServerVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: connect %s: %w", url, err)
	}
	log.Info().Str("url", nc.ConnectedUrlRedacted()).Str("server_id", nc.ConnectedServerId()).
		Str("server_version", nc.ConnectedServerVersion()).Int("attempts", attempt).Msg("nats connected")
	return nc, nil
}

// natsOptions translates o into nats options, checking what can be checked
// before connecting.
func (o Options) natsOptions(log zerolog.Logger) ([]nats.Option, error) {
	methods := 0
	for _, set := range []bool{o.CredsFile != "", o.NKeyFile != "", o.User != "" || o.Password != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		return nil, errors.New("bus: connect: give at most one of creds file, nkey file and user/password")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("bus: connect: TLS certificate and key must be given together")
	}
	if o.InboxPrefix != "" && !validSubject(o.InboxPrefix) {
		return nil, fmt.Errorf("%w: connect: inbox prefix %q", ErrInvalidSubject, o.InboxPrefix)
	}
	if o.ReconnectWait < 0 || o.PingInterval < 0 {
		return nil, errors.New("bus: connect: negative reconnect wait or ping interval")
	}
	wait := o.ReconnectWait
	if wait == 0 {
		wait = DefaultReconnectWait
	}
	ping := o.PingInterval
	if ping == 0 {
		ping = DefaultPingInterval
	}

	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(wait),
		nats.ReconnectJitter(wait/2, wait),
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil && (nc.IsClosed() || nc.IsDraining()) {
				log.Info().Msg("nats disconnected: closing") // our own shutdown, not a fault
			} else {
				log.Warn().Err(err).Msg("nats disconnected")
			}
			if o.OnDisconnect != nil {
				o.OnDisconnect()
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Str("server_id", nc.ConnectedServerId()).
				Uint64("reconnects", nc.Stats().Reconnects).Msg("nats reconnected")
			if err := CheckServerVersion(nc.ConnectedServerVersion()); err != nil {
				// A cluster member older than the one first connected to: the
				// connection is kept (refusing it would stop dispatching), but
				// the operator must know.
				log.Error().Err(err).Str("server_id", nc.ConnectedServerId()).Msg("reconnected to an unsupported nats-server")
			}
			if o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug().Err(err).Msg("nats reconnect attempt failed")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			err := nc.LastError()
			ev := log.Info()
			if err != nil {
				ev = log.Error().Err(err)
			}
			ev.Msg("nats connection closed")
			if o.OnClosed != nil {
				o.OnClosed(err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
			if o.OnAsyncError != nil {
				o.OnAsyncError(err)
			}
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			log.Warn().Str("server_id", nc.ConnectedServerId()).Msg("nats server entering lame duck mode")
		}),
	}
	switch {
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus: connect: nkey file: %w", err)
		}
		opts = append(opts, opt)
	case o.User != "" || o.Password != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	return opts, nil // an option refusing its value (an unreadable TLS file) fails in natsdial.Dial, before any attempt
}
