package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
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
}

// Connect connects to NATS. The first connection is retried with exponential
// backoff until it succeeds or ctx ends; a rejection of the credentials
// (ErrAuth, wrapping the NATS error) or an unreadable credentials or TLS file is
// permanent and returned at once; so is a server that closes
// tlsClosedAttempts attempts in a row right after the TLS handshake, as one
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
	url := redactURLs(servers) // for logs and errors

	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = 0 // bounded by ctx only

	attempt, closedAfterTLS := 0, 0
	var nc *nats.Conn
	var last error
	op := func() error {
		attempt++
		c, err := nats.Connect(servers, opts...)
		if err == nil {
			nc = c
			return nil
		}
		if isAuthError(err) {
			return backoff.Permanent(fmt.Errorf("%w: connect %s: %w", ErrAuth, url, err))
		}
		// A refused client certificate does not always reach us as the
		// server's alert (isCertificateError): under TLS 1.3 the server checks
		// it after our side of the handshake is done, and its close can beat
		// its alert. A server restarting closes one attempt that way; one
		// that refuses us closes them all.
		if isClosedAfterTLSHandshake(err) {
			closedAfterTLS++
		} else {
			closedAfterTLS = 0
		}
		if closedAfterTLS == tlsClosedAttempts {
			return backoff.Permanent(fmt.Errorf("%w: connect %s: the server closed the connection right after the TLS handshake on %d attempts in a row, "+
				"as it does when it refuses the client certificate or requires one: %w", ErrAuth, url, closedAfterTLS, err))
		}
		if isFileError(err) {
			return backoff.Permanent(fmt.Errorf("bus: connect %s: %w", url, err))
		}
		last = err
		log.Warn().Err(err).Int("attempt", attempt).Str("url", url).Msg("nats connect failed, retrying")
		return err
	}
	if err := backoff.Retry(op, backoff.WithContext(b, ctx)); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, fmt.Errorf("bus: connect %s: gave up after %d attempts: %w (last error: %v)", url, attempt, cerr, last)
		}
		return nil, err // permanent, already wrapped
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
			ev := log.Info()
			if err := nc.LastError(); err != nil {
				ev = log.Warn().Err(err)
			}
			ev.Msg("nats connection closed")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
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
	// Apply the options once to a scratch copy so that unreadable TLS files
	// fail here, permanently, instead of inside the retry loop.
	scratch := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&scratch); err != nil {
			return nil, fmt.Errorf("bus: connect: %w", err)
		}
	}
	return opts, nil
}

// isAuthError reports whether err is the server rejecting the credentials.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) ||
		errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrAccountAuthExpired) ||
		errors.Is(err, nats.ErrNkeysNotSupported) ||
		isCertificateError(err)
}

// tlsClosedAttempts is how many attempts in a row closed by the server right
// after the TLS handshake make Connect give up (isClosedAfterTLSHandshake).
const tlsClosedAttempts = 3

// isClosedAfterTLSHandshake reports whether the server closed the connection
// just after a completed TLS handshake, before answering CONNECT: what a
// server that refuses the client's certificate does when its alert is lost
// in the race with its close. nats.go tells this case apart only by the
// text of its error (Conn.tlsHandshakeEOF).
func isClosedAfterTLSHandshake(err error) bool {
	return errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "connection closed by remote after TLS handshake")
}

// isCertificateError reports whether a TLS handshake failed on a certificate:
// the server's did not verify against our CAs, or the server refused ours.
// Retrying cannot fix either.
func isCertificateError(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		invalid   x509.CertificateInvalidError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verify) {
		return true
	}
	if errors.As(err, &alert) {
		switch alert {
		case 42, 43, 44, 45, 46, 48, 116: // bad, unsupported, revoked, expired, unknown certificate; unknown CA; certificate required
			return true
		}
	}
	// Over TCP, crypto/tls reports the server's alert as a *net.OpError
	// "remote error" around an unexported alert type: match its text.
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		switch op.Err.Error() {
		case "tls: bad certificate", "tls: unsupported certificate", "tls: revoked certificate",
			"tls: expired certificate", "tls: unknown certificate", "tls: unknown certificate authority",
			"tls: certificate required":
			return true
		}
	}
	return false
}

// isFileError reports whether err comes from reading a local file (creds, TLS),
// which retrying will not fix.
func isFileError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}

// redactURLs hides passwords in a comma-separated URL list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
