package natstest

import (
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"
)

// ClosingTLSServer is a test double of a nats-server that refuses the
// client's certificate and whose close wins the race with its alert: it sends
// INFO asking for TLS, completes the handshake, and closes the connection
// before reading CONNECT. It does so for the first closes connections, then
// answers the protocol (INFO, then PONG to the client's PING) like a server
// that accepts.
type ClosingTLSServer struct {
	// URL is the server's nats:// URL; CAFile the PEM file of the CA that
	// signed its certificate, for the client's RootCAs.
	URL, CAFile string
	// Conns counts the connections accepted.
	Conns atomic.Int64
}

// StartClosingTLSServer starts a ClosingTLSServer on a loopback port that
// closes the first closes connections after the handshake; it stops at the
// end of the test.
func StartClosingTLSServer(t testing.TB, closes int64) *ClosingTLSServer {
	t.Helper()
	pki := NewPKI(t, "closing test server")
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &ClosingTLSServer{URL: "nats://" + ln.Addr().String(), CAFile: pki.CA}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg, s.Conns.Add(1) <= closes)
		}
	}()
	return s
}

func (s *ClosingTLSServer) serve(c net.Conn, cfg *tls.Config, refuse bool) {
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
