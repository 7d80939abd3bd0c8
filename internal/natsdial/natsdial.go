// Package natsdial makes a program's first connection to NATS, the same way
// on both sides (bus.Connect for the dispatcher, workerkit.Connect for the
// worker side): a server that cannot be reached yet is retried with backoff
// until the caller's context ends, and a server that refuses the client (its
// credentials or its certificate) or a file the options cannot read ends the
// wait at once, with an error that says so, since no retry fixes either.
package natsdial

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
)

// ClosedAfterTLSAttempts is how many attempts in a row that the server closes
// right after the TLS handshake make Dial give up (ClosedAfterTLS).
const ClosedAfterTLSAttempts = 3

// RefusedError is a connection the server refused: it rejected the
// credentials or a certificate, or it closed ClosedAfterTLSAttempts attempts
// in a row right after the TLS handshake (Closes), as one refusing the client
// certificate may. Retrying cannot fix it.
type RefusedError struct {
	// Err is the last attempt's error.
	Err error
	// Closes is ClosedAfterTLSAttempts when the closes after the handshake
	// are the reason, 0 when the server said why.
	Closes int
}

func (e *RefusedError) Error() string {
	if e.Closes > 0 {
		return fmt.Sprintf("the server closed the connection right after the TLS handshake on %d attempts in a row, "+
			"as it does when it refuses the client certificate or requires one: %v", e.Closes, e.Err)
	}
	return e.Err.Error()
}

func (e *RefusedError) Unwrap() error { return e.Err }

// Dial connects with nats.Connect(servers, opts...), once an attempt, waiting
// b's next backoff between attempts, until one succeeds or ctx ends. It
// returns the connection and the number of attempts. onRetry, when not nil,
// is told of each failed attempt before the wait that follows it.
//
// It gives up at once with a *RefusedError when the server refuses the
// client; with the option's error, before any attempt, when an option refuses
// its value; and with the attempt's own error when a file the options read is
// missing or unreadable (an *fs.PathError) or a server URL does not parse (a
// *url.Error). When ctx ends first, the error wraps ctx.Err() and names the
// last attempt's error.
func Dial(ctx context.Context, servers string, opts []nats.Option, b backoff.BackOff, onRetry func(attempt int, err error)) (*nats.Conn, int, error) {
	// An option that refuses its value (a TLS file that cannot be read, an
	// invalid inbox prefix) refuses it on every attempt: try them once.
	scratch := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&scratch); err != nil {
			return nil, 0, err
		}
	}
	b.Reset()
	attempts, closes := 0, 0
	var last error
	for {
		attempts++
		nc, err := nats.Connect(servers, opts...)
		if err == nil {
			return nc, attempts, nil
		}
		last = err
		if Refused(err) {
			return nil, attempts, &RefusedError{Err: err}
		}
		// A refused client certificate does not always reach us as the
		// server's alert: under TLS 1.3 the server checks it after our side
		// of the handshake is done, and its close can beat its alert. A
		// server restarting closes one attempt that way; one that refuses us
		// closes them all.
		if ClosedAfterTLS(err) {
			closes++
		} else {
			closes = 0
		}
		if closes == ClosedAfterTLSAttempts {
			return nil, attempts, &RefusedError{Err: err, Closes: closes}
		}
		var pe *fs.PathError
		var ue *neturl.Error
		if errors.As(err, &pe) || errors.As(err, &ue) {
			return nil, attempts, err
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return nil, attempts, fmt.Errorf("gave up after %d attempts: %w", attempts, err)
		}
		if onRetry != nil {
			onRetry(attempts, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempts, fmt.Errorf("gave up after %d attempts: %w (last error: %v)", attempts, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// Refused reports whether err is the server refusing the client: its
// credentials (authorization violation, expired or revoked), or a TLS
// handshake that failed on a certificate (the server's did not verify
// against our CAs, or the server refused ours).
func Refused(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) ||
		errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrAccountAuthExpired) ||
		errors.Is(err, nats.ErrNkeysNotSupported) ||
		certificateError(err)
}

// ClosedAfterTLS reports whether the server closed the connection just after
// a completed TLS handshake, before answering CONNECT: what a server that
// refuses the client's certificate does when its alert is lost in the race
// with its close, and what a server restarting at that moment may do once.
// nats.go tells this case apart only by the text of its error
// (Conn.tlsHandshakeEOF); if that text changes, Dial goes back to retrying.
func ClosedAfterTLS(err error) bool {
	return errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "connection closed by remote after TLS handshake")
}

// certificateError reports whether a TLS handshake failed on a certificate.
func certificateError(err error) bool {
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

// Redact hides the passwords of a comma-separated list of server URLs, for
// logs and errors.
func Redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
