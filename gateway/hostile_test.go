package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fairdispatch/internal/natstest"
)

// hostile is a gateway behind a real listener with the HTTP limits of
// cmd/gateway (shortened), counting the server's open connections.
type hostile struct {
	*gw
	addr string
	open atomic.Int64
}

func startHostile(t *testing.T, lim HTTPLimits, maxConns int) *hostile {
	g := startGateway(t, func(o *Options) { o.MaxBodyBytes = 1 << 20 })
	h := &hostile{gw: g}
	lim.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			h.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			h.open.Add(-1)
		}
	}
	srv := NewHTTPServer(g.srv, lim)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(LimitListener(ln, maxConns)) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.addr = ln.Addr().String()
	return h
}

// idle waits until the server holds no connection and no request in flight.
func (h *hostile) idle(t *testing.T, timeout time.Duration) {
	t.Helper()
	natstest.Eventually(t, timeout, func() bool {
		if h.open.Load() != 0 {
			return false
		}
		for _, tn := range h.srv.keys {
			if tn.inflight.Load() != 0 {
				return false
			}
		}
		return true
	}, "connections %d open, want 0 and nothing in flight", h.open.Load())
}

// statusOf reads the status line of a raw HTTP response on c.
func statusOf(c net.Conn) (int, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func header(path string, extra string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-a\r\nContent-Type: application/json\r\n" + extra + "\r\n"
}

// A 100 MB body is refused with 413 after at most the limit was read, with
// a Content-Length at once, chunked once the limit is passed.
func TestHostileHugeBody(t *testing.T) {
	h := startHostile(t, HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}, 100)
	const size = 100 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if chunked {
				_, err = io.WriteString(c, header("/v1/completions", "Transfer-Encoding: chunked\r\n"))
			} else {
				_, err = io.WriteString(c, header("/v1/completions", fmt.Sprintf("Content-Length: %d\r\n", size)))
			}
			if err != nil {
				t.Fatal(err)
			}
			sent := make(chan int64, 1)
			go func() { // the client goes on writing; the server stops reading
				buf := []byte(strings.Repeat("x", 64<<10))
				var n int64
				for n < size {
					var err error
					if chunked {
						_, err = fmt.Fprintf(c, "%x\r\n%s\r\n", len(buf), buf)
					} else {
						_, err = c.Write(buf)
					}
					if err != nil {
						break
					}
					n += int64(len(buf))
				}
				sent <- n
			}()
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			st, err := statusOf(c)
			if err != nil || st != 413 {
				t.Fatalf("status %d, %v; want 413", st, err)
			}
			c.Close()
			if n := <-sent; n >= size {
				t.Logf("the server read all %d bytes", n)
			}
		})
	}
	h.idle(t, 10*time.Second)
}

// A body that never finishes is cut off at the read timeout: 408, and the
// connection closed.
func TestHostileBodyNeverEnds(t *testing.T) {
	h := startHostile(t, HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second}, 100)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, header("/v1/completions", "Content-Length: 1000\r\n")+`{"model":"m1","prompt":"`)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	st, err := statusOf(c)
	if err != nil || st != 408 {
		t.Fatalf("status %d, %v; want 408", st, err)
	}
	h.idle(t, 10*time.Second)
}

// Headers that never finish are cut off at the header timeout; a header
// block over the limit gets 431.
func TestHostileHeaders(t *testing.T) {
	h := startHostile(t, HTTPLimits{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, MaxHeaderBytes: 4096}, 100)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Log("the server answered a header block that never ended")
	}
	c2, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = io.WriteString(c2, header("/v1/completions", "X-Big: "+strings.Repeat("y", 8192)+"\r\nContent-Length: 2\r\n")+"{}")
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if st, err := statusOf(c2); err != nil || st != 431 {
		t.Fatalf("status %d, %v; want 431", st, err)
	}
	h.idle(t, 10*time.Second)
}

// raiseNoFile raises the soft limit of open files to at least n when the
// hard limit allows.
func raiseNoFile(t testing.TB, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("open files limited to %d (hard), %d needed", lim.Max, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
}

// 10,000 idle connections: requests are still served while they are open,
// and the server closes every one at its header timeout, holding nothing.
// The idle clients run in a child process (this test binary, as
// TestIdleClientHelper): both ends of 10,000 connections in one process
// would need 20,000 descriptors, the hard limit here (RLIMIT_NOFILE 20000,
// which this process may not raise). Each process raises its soft limit to
// what it needs.
func TestHostileIdleConnections(t *testing.T) {
	const n = 10000
	raiseNoFile(t, n+2048)
	// The header timeout is long enough for the server to accept all n
	// under the race detector before the first ones time out, even on a
	// loaded machine (7,133 were accepted in 20 s at a load average of 13).
	const accept = 45 * time.Second
	h := startHostile(t, HTTPLimits{ReadHeaderTimeout: accept, ReadTimeout: accept + 5*time.Second}, n+100)
	baseline := runtime.NumGoroutine()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "GATEWAY_IDLE_ADDR="+h.addr, "GATEWAY_IDLE_N="+strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(prefix string) string {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the idle clients exited before %q", prefix)
				}
				if v, ok := strings.CutPrefix(l, prefix); ok {
					return v
				}
			case <-time.After(90 * time.Second):
				t.Fatalf("no %q from the idle clients", prefix)
			}
		}
	}
	if got := next("connected "); got != strconv.Itoa(n) {
		t.Fatalf("the idle clients connected %s", got)
	}
	natstest.Eventually(t, accept, func() bool { return h.open.Load() >= n }, "the server accepts all %d (%d)", n, h.open.Load())
	resp, body := h.post("/v1/chat/completions", "sk-a", chatBody("hi", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("a request beside %d idle connections: %d %s", n, resp.StatusCode, body)
	}
	if got := next("closed by the server "); got != strconv.Itoa(n) {
		t.Fatalf("%s of %d idle connections closed by the server", got, n)
	}
	h.idle(t, 10*time.Second)
	natstest.Eventually(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= baseline+50 }, "goroutines back near %d (now %d)", baseline, runtime.NumGoroutine())
}

// TestIdleClientHelper is the child process of TestHostileIdleConnections:
// it opens GATEWAY_IDLE_N connections to GATEWAY_IDLE_ADDR, sends nothing,
// and counts those the server closes. Without the variables it does nothing.
func TestIdleClientHelper(t *testing.T) {
	addr := os.Getenv("GATEWAY_IDLE_ADDR")
	n, _ := strconv.Atoi(os.Getenv("GATEWAY_IDLE_N"))
	if addr == "" || n == 0 {
		t.Skip("the child process of TestHostileIdleConnections")
	}
	raiseNoFile(t, uint64(n)+1024)
	d := net.Dialer{Timeout: 10 * time.Second}
	conns := make([]net.Conn, 0, n)
	for len(conns) < n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	fmt.Printf("connected %d\n", len(conns))
	var wg sync.WaitGroup
	var closed atomic.Int64
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed.Add(1)
			}
		}(c)
	}
	wg.Wait()
	fmt.Printf("closed by the server %d\n", closed.Load())
}

// A kept-alive connection serves a request after an earlier stream's write
// deadline has passed (net/http clears a handler's write deadline after each
// request; this keeps it so). The write timeout is a second: the last
// deadline also covers net/http's final flush after the handler returns,
// which must not miss it on a loaded machine.
func TestKeepAliveAfterWriteDeadline(t *testing.T) {
	const writeTimeout = time.Second
	g := startGateway(t, func(o *Options) { o.WriteTimeout = writeTimeout })
	h := &hostile{gw: g}
	srv := NewHTTPServer(g.srv, HTTPLimits{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	h.addr = ln.Addr().String()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send := func() int {
		body := chatBody("hi", `,"stream":true`)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-a\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("stream %q", b)
		}
		return resp.StatusCode
	}
	if st := send(); st != 200 {
		t.Fatalf("first: %d", st)
	}
	time.Sleep(writeTimeout + 500*time.Millisecond) // not a wait for a condition: the first stream's write deadline must pass
	if st := send(); st != 200 {
		t.Fatalf("second, on the same connection: %d", st)
	}
}

// tinyBuffers is a listener whose connections have a send buffer of 4 KiB,
// so that a client that does not read blocks the server's writes at once.
type tinyBuffers struct{ net.Listener }

func (l tinyBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		_ = c.(*net.TCPConn).SetWriteBuffer(4096)
	}
	return c, err
}

// TestHostileClientStopsReading: a client that sends its request and never
// reads the answer is dropped after the write timeout, whether the answer is
// streamed or whole (a large one, past the sockets' buffers): its handler,
// its connection and its tenant's concurrency slot are freed while the
// client still holds the connection open.
func TestHostileClientStopsReading(t *testing.T) {
	g := startGatewayWith(t, strings.Replace(testConfig, "max_tokens: 1000", "max_tokens: 200000", 1),
		func(o *Options) { o.WriteTimeout = time.Second })
	srv := NewHTTPServer(g.srv, HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(tinyBuffers{ln}) }()
	t.Cleanup(func() { _ = srv.Close() })
	dial := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	inFlight := func() (n int64) {
		for _, tn := range g.srv.keys {
			n += tn.inflight.Load()
		}
		return n
	}
	for _, c := range []struct {
		name, body string
	}{
		{"whole", `{"model":"m1","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`},
		{"streamed", `{"model":"m1","max_tokens":20000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		conn, err := dial.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-a\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(c.body), c.body)
		natstest.Eventually(t, 20*time.Second, func() bool { return inFlight() == 1 }, "%s: the request in flight", c.name)
		// Unfixed, a whole answer's write blocked for as long as the client
		// kept the connection open.
		natstest.Eventually(t, 20*time.Second, func() bool { return inFlight() == 0 },
			"%s: the request freed while its client, not reading, keeps the connection", c.name)
		conn.Close()
	}
}
