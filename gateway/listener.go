package gateway

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// LimitListener returns a listener that accepts at most n connections open
// at once: past n, Accept waits for one to close, and further clients wait
// in the kernel's listen backlog. It bounds the file descriptors and
// goroutines that idle or slow clients can hold.
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// HTTPLimits are the connection limits of the API's HTTP server.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds the wait for a request's headers, and on a
	// kept-alive connection for the next request's.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included.
	ReadTimeout time.Duration
	// IdleTimeout bounds an idle kept-alive connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block (over it: 431).
	MaxHeaderBytes int
	// ConnState, when not nil, is told of each connection's state changes.
	ConnState func(net.Conn, http.ConnState)
}

// NewHTTPServer returns the API's HTTP server for h within l. It sets no
// WriteTimeout, which would cut a long stream: each write has its own
// deadline (Options.WriteTimeout).
func NewHTTPServer(h http.Handler, l HTTPLimits) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes, ConnState: l.ConnState}
}
