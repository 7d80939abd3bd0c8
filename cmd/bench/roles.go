package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/bus"
	"fairdispatch/internal/cli"
	"fairdispatch/naming"
	"fairdispatch/wire"
)

// roleEnv, when set in the environment, makes this program one of the helper
// processes the bench starts from its own executable: "nats" (the embedded
// nats-server), "forwarder" (the bare pipe) or "router" (a baseline router
// of the fleet replay, router.go). They run in processes of their
// own so that /proc gives the CPU of each apart from the bench process's.
const roleEnv = "FAIRDISPATCH_BENCH_ROLE"

// runRole runs the helper process named role and returns its exit code.
func runRole(role string, args []string) int {
	var err error
	switch role {
	case "nats":
		err = natsRole(args)
	case "forwarder":
		err = forwarderRole(args)
	case "router":
		err = routerRole(args)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		return 1
	}
	return 0
}

// natsRole runs nats-server (the library, embedded) with JetStream on file
// storage in args[0], syncing as args[1] says (bus.ParseSync), prints its
// client URL on stdout, and runs until SIGTERM or until its standard input
// closes (the bench died). With a third argument n > 1 it runs a cluster of
// n servers instead (--cluster), all in this process so that their CPU is
// read as one, named n0, n1... with a store each under args[0], and prints
// their client URLs, n0's first, separated by commas, once JetStream answers.
func natsRole(args []string) error {
	if len(args) != 2 && len(args) != 3 {
		return fmt.Errorf("want the store directory, the sync and optionally the cluster's size")
	}
	sync, err := bus.ParseSync(args[1])
	if err != nil {
		return fmt.Errorf("sync %q: %w", args[1], err)
	}
	nodes := 1
	if len(args) == 3 {
		if nodes, err = strconv.Atoi(args[2]); err != nil || nodes < 1 {
			return fmt.Errorf("cluster size %q: want an integer >= 1", args[2])
		}
	}
	var routes []*url.URL
	var cports []int
	for range nodes {
		if nodes == 1 {
			break
		}
		addr, err := cli.FreeAddr()
		if err != nil {
			return err
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		cports = append(cports, p)
		routes = append(routes, &url.URL{Scheme: "nats", Host: addr})
	}
	var srvs []*server.Server
	defer func() {
		for _, srv := range srvs {
			srv.Shutdown()
			srv.WaitForShutdown()
		}
	}()
	var urls []string
	for i := range nodes {
		opts := &server.Options{
			ServerName: "bench", Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: args[0], NoLog: true, NoSigs: true,
		}
		if nodes > 1 {
			opts.ServerName = "n" + strconv.Itoa(i)
			opts.StoreDir = filepath.Join(args[0], opts.ServerName)
			opts.Cluster = server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: cports[i]}
			opts.Routes = routes
		}
		sync.Apply(opts)
		srv, err := server.NewServer(opts)
		if err != nil {
			return err
		}
		srv.Start()
		srvs = append(srvs, srv)
		if !srv.ReadyForConnections(10 * time.Second) {
			return fmt.Errorf("%s not ready after 10s", opts.ServerName)
		}
		urls = append(urls, srv.ClientURL())
	}
	if nodes > 1 {
		if err := waitJetStream(urls[0], 30*time.Second); err != nil {
			return err
		}
	}
	fmt.Println(strings.Join(urls, ","))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the parent goes
		stop()
	}()
	<-ctx.Done()
	return nil
}

// waitJetStream waits until the JetStream of the server at url answers (a
// cluster has elected its meta leader).
func waitJetStream(url string, timeout time.Duration) error {
	nc, js, err := connectJS(url, nats.Name("bench-nats-wait"))
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream of the cluster not answering after %v: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connectJS connects to the NATS server at url and opens its JetStream.
func connectJS(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// pullRequests pulls the request stream of names, batch messages at a time,
// through the durable consumer durable (explicit ack, delivering all), which
// it creates or updates with ackWait and maxAckPending; the pull stops when
// ctx ends. The forwarder and the baseline routers take their requests so.
func pullRequests(ctx context.Context, js jetstream.JetStream, names naming.Names, durable string, ackWait time.Duration, maxAckPending, batch int) (jetstream.MessagesContext, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := js.CreateOrUpdateConsumer(cctx, names.ReqStream(), jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		MaxAckPending: maxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	cancel()
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	return it, nil
}

// eachRequest hands every message of it to f until the pull stops: nil
// when ctx ended it, else the pull's error.
func eachRequest(ctx context.Context, it jetstream.MessagesContext, f func(jetstream.Msg)) error {
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("next: %w", err)
		}
		f(m)
	}
}

// forwarderRole is the bare pipe: args are the NATS URL, the number of
// workers and the subject prefix. It pulls the prefix's request stream
// (DISPATCH_REQ for the default prefix) through the durable "forwarder" (explicit
// ack, MaxAckPending as the dispatcher's default) in large batches and sends
// each message to the next worker in turn as a core NATS request carrying
// Dispatch-Ack, with every answer arriving on one wildcard inbox (as
// bus.Handshaker does). It never acknowledges: the workers do. No scheduling,
// no bookkeeping, no timeouts: the physical limit of the hop.
func forwarderRole(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("want the NATS URL, the number of workers and the subject prefix")
	}
	names, err := naming.New(args[2])
	if err != nil {
		return err
	}
	workers, err := strconv.Atoi(args[1])
	if err != nil || workers < 1 {
		return fmt.Errorf("workers %q: want an integer >= 1", args[1])
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, js, err := connectJS(args[0], nats.Name("bench-forwarder"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	inbox := nc.NewInbox() + "."
	sub, err := nc.Subscribe(inbox+"*", func(*nats.Msg) {})
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	subjects := make([]string, workers)
	for i := range subjects {
		subjects[i] = names.Work(workerID(i))
	}
	it, err := pullRequests(ctx, js, names, "forwarder", 30*time.Second, 500000, 1024)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	var next uint64
	return eachRequest(ctx, it, func(m jetstream.Msg) {
		h := m.Headers()
		if h == nil {
			h = nats.Header{}
		}
		h[wire.HeaderAck] = []string{m.Reply()}
		next++
		if err := nc.PublishMsg(&nats.Msg{
			Subject: subjects[next%uint64(workers)],
			Reply:   inbox + strconv.FormatUint(next, 36),
			Header:  h, Data: m.Data(),
		}); err != nil {
			fmt.Fprintf(os.Stderr, "forward: %v\n", err)
		}
	})
}

// workerID names worker i of the throughput workers.
func workerID(i int) string { return "w" + strconv.Itoa(i) }

// child is a helper process started from this executable or from the
// dispatcher binary.
type child struct {
	cmd  *exec.Cmd
	name string
	log  string // file holding its stderr
	// stdin is kept referenced: were it collected, the child would see EOF.
	stdin io.WriteCloser
}

// startRole starts this executable as role with args; it waits for the first
// line on its stdout and returns it.
func startRole(role, logPath string, args ...string) (*child, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return startChild(cmd, role, logPath, true)
}

// startChild starts cmd with stderr to logPath; with firstLine it waits (up to
// 60 s) for a line on stdout and returns it.
func startChild(cmd *exec.Cmd, name, logPath string, firstLine bool) (*child, string, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = lf
	var out *bufio.Reader
	if firstLine {
		pr, err := cmd.StdoutPipe()
		if err != nil {
			return nil, "", err
		}
		out = bufio.NewReader(pr)
	}
	stdin, err := cmd.StdinPipe() // closed when we exit: the nats role then stops
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	lf.Close()
	c := &child{cmd: cmd, name: name, log: logPath, stdin: stdin}
	if !firstLine {
		return c, "", nil
	}
	line := make(chan string, 1)
	go func() {
		s, _ := out.ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = out.WriteTo(discard{}) // keep the pipe drained
	}()
	select {
	case s := <-line:
		if s == "" {
			c.kill()
			return nil, "", fmt.Errorf("%s exited before it was ready; see %s", name, logPath)
		}
		return c, s, nil
	case <-time.After(60 * time.Second):
		c.kill()
		return nil, "", fmt.Errorf("%s not ready after 60s; see %s", name, logPath)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM and waits up to grace, then kills.
func (c *child) stop(grace time.Duration) {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
