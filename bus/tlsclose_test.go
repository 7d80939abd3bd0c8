package bus

import (
	"errors"
	"strings"
	"testing"

	"fairdispatch/internal/natsdial"
	"fairdispatch/internal/natstest"
)

// TestConnectGivesUpWhenEveryAttemptClosesAfterTLS: a server that closes
// every connection right after the TLS handshake (a refused client
// certificate whose alert lost the race with the close) makes Connect give up
// with ErrAuth after natsdial.ClosedAfterTLSAttempts attempts, instead of
// retrying forever.
func TestConnectGivesUpWhenEveryAttemptClosesAfterTLS(t *testing.T) {
	s := natstest.StartClosingTLSServer(t, 1<<40)
	_, err := Connect(ctxT(t), Options{URL: s.URL, TLSCA: s.CAFile}, nopLogger())
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "right after the TLS handshake") {
		t.Fatalf("Connect: %v; want ErrAuth naming the close after the TLS handshake", err)
	}
	if got := s.Conns.Load(); got != natsdial.ClosedAfterTLSAttempts {
		t.Errorf("%d attempts, want %d", got, natsdial.ClosedAfterTLSAttempts)
	}
}
