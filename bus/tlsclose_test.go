package bus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// closingTLSServer is a test double of a nats-server that refuses the
// client's certificate and whose close wins the race with its alert: it sends
// INFO asking for TLS, completes the handshake, and closes the connection
// before reading CONNECT. It does so for the first closes connections, then
// answers the protocol (INFO, then PONG to the client's PING) like a server
// that accepts.
type closingTLSServer struct {
	URL    string
	CAFile string
	conns  atomic.Int64
}

func startClosingTLSServer(t *testing.T, closes int64) *closingTLSServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "closing test server"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &closingTLSServer{URL: "nats://" + ln.Addr().String(), CAFile: ca}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg, s.conns.Add(1) <= closes)
		}
	}()
	return s
}

func (s *closingTLSServer) serve(c net.Conn, cfg *tls.Config, refuse bool) {
	defer c.Close()
	const info = `INFO {"server_id":"closing","version":"2.15.2","proto":1,"max_payload":1048576,"tls_required":true,"headers":true}` + "\r\n"
	if _, err := c.Write([]byte(info)); err != nil {
		return
	}
	tc := tls.Server(c, cfg)
	if err := tc.Handshake(); err != nil || refuse {
		return
	}
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "PING\r\n") {
		n, err := tc.Read(buf)
		if err != nil {
			return
		}
		seen.Write(buf[:n])
	}
	if _, err := tc.Write([]byte("PONG\r\n")); err != nil {
		return
	}
	tc.Read(buf) // until the client closes
}

// TestConnectGivesUpWhenEveryAttemptClosesAfterTLS: a server that closes
// every connection right after the TLS handshake (a refused client
// certificate whose alert lost the race with the close) makes Connect give up
// with ErrAuth after tlsClosedAttempts attempts, instead of retrying forever.
func TestConnectGivesUpWhenEveryAttemptClosesAfterTLS(t *testing.T) {
	s := startClosingTLSServer(t, 1<<40)
	_, err := Connect(ctxT(t), Options{URL: s.URL, TLSCA: s.CAFile}, nopLogger())
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "right after the TLS handshake") {
		t.Fatalf("Connect: %v; want ErrAuth naming the close after the TLS handshake", err)
	}
	if got := s.conns.Load(); got != tlsClosedAttempts {
		t.Errorf("%d attempts, want %d", got, tlsClosedAttempts)
	}
}

// TestConnectRetriesOneCloseAfterTLS: a close after the handshake that does
// not repeat (a server restarting at that moment) is retried, and the next
// attempt connects.
func TestConnectRetriesOneCloseAfterTLS(t *testing.T) {
	s := startClosingTLSServer(t, tlsClosedAttempts-1)
	nc, err := Connect(ctxT(t), Options{URL: s.URL, TLSCA: s.CAFile}, nopLogger())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	nc.Close()
	if got := s.conns.Load(); got != tlsClosedAttempts {
		t.Errorf("%d attempts, want %d", got, tlsClosedAttempts)
	}
}
