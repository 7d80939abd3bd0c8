package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/internal/cli"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// workerConns is how many NATS connections the in-process workers of the
// bare pipe and fairdispatch share (the direct work queue's 8 workers have
// one each).
const workerConns = 8

// classes are the subject tokens requests are published to, in turn.
var classes = []string{"c0", "c1", "c2", "c3"}

// system is one of the three set up for measurement.
type system struct {
	middle *child // the forwarder or dispatcher process; nil for the direct work queue
	admin  string // the dispatcher's admin address
	stop   func()
}

func (s *system) middlePid() int {
	if s.middle == nil {
		return 0
	}
	return s.middle.pid()
}

// resetStreams deletes the request and dead-letter streams, with their
// consumers and messages, and the policy bucket, and creates the streams
// again as the dispatcher would.
func (b *bench) resetStreams() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{b.opt.names.ReqStream(), b.opt.names.DLQStream()} {
		if err := b.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", s, err)
		}
	}
	// The policy bucket too: a dispatcher runs the bucket's revision over its
	// --policy-config, so each one must start without the last one's policy.
	if err := b.js.DeleteKeyValue(ctx, b.opt.names.PolicyBucket()); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete bucket %s: %w", b.opt.names.PolicyBucket(), err)
	}
	return bus.EnsureStreams(ctx, b.js, bus.StreamConfig{Prefix: b.opt.prefix, Replicas: b.opt.cluster})
}

// connect opens k connections named name-<i>.
func (b *bench) connect(name string, k int) ([]*nats.Conn, error) {
	var out []*nats.Conn
	for i := range k {
		nc, err := nats.Connect(b.url, nats.Name(name+"-"+strconv.Itoa(i)), nats.MaxReconnects(-1))
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, nc)
	}
	return out, nil
}

func closeAll(ncs []*nats.Conn) {
	for _, nc := range ncs {
		nc.Close()
	}
}

func flushAll(ncs []*nats.Conn) error {
	for _, nc := range ncs {
		if err := nc.FlushTimeout(10 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

// acceptDispatch is a bench worker's answer to the dispatch m on nc: it
// counts it, accepts it (an empty reply) and acknowledges the request where
// the dispatch carries Dispatch-Ack; a failed publication is logged as
// who's.
func (b *bench) acceptDispatch(nc *nats.Conn, m *nats.Msg, who string) {
	accepted(m.Data)
	if err := nc.Publish(m.Reply, nil); err != nil {
		b.logf("%s reply: %v", who, err)
	}
	if ack := m.Header.Get(wire.HeaderAck); ack != "" {
		if err := nc.Publish(ack, []byte("+ACK")); err != nil {
			b.logf("%s ack: %v", who, err)
		}
	}
}

// startBare sets up the bare pipe: workers answering core requests on
// dispatch.work.<id>, then the forwarder process.
func (b *bench) startBare() (*system, error) {
	if err := b.resetStreams(); err != nil {
		return nil, err
	}
	conns, err := b.connect("bench-bare-worker", workerConns)
	if err != nil {
		return nil, err
	}
	for i := range b.opt.workers {
		nc := conns[i%len(conns)]
		sub, err := nc.Subscribe(b.opt.names.Work(workerID(i)), func(m *nats.Msg) {
			b.acceptDispatch(nc, m, "bare worker")
		})
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			closeAll(conns)
			return nil, err
		}
	}
	if err := flushAll(conns); err != nil {
		closeAll(conns)
		return nil, err
	}
	fw, _, err := startRole("forwarder", filepath.Join(b.tmp, "forwarder.log"), b.url, strconv.Itoa(b.opt.workers), b.opt.prefix)
	if err != nil {
		closeAll(conns)
		return nil, err
	}
	return &system{middle: fw, stop: func() {
		fw.stop(5 * time.Second)
		closeAll(conns)
	}}, nil
}

// startDirect sets up the direct work queue: b.opt.directWorkers workers, one
// connection each, pulling from one shared durable consumer and acknowledging.
func (b *bench) startDirect() (*system, error) {
	if err := b.resetStreams(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.opt.names.ReqStream(), jetstream.ConsumerConfig{
		Durable: "direct", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 500000, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	cancel()
	if err != nil {
		return nil, err
	}
	conns, err := b.connect("bench-direct-worker", b.opt.directWorkers)
	if err != nil {
		return nil, err
	}
	var its []jetstream.MessagesContext
	done := make(chan struct{}, len(conns))
	for _, nc := range conns {
		js, err := jetstream.New(nc)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		c, err := js.Consumer(context.Background(), b.opt.names.ReqStream(), cons.CachedInfo().Name)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		it, err := c.Messages(jetstream.PullMaxMessages(256))
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		its = append(its, it)
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				m, err := it.Next()
				if err != nil {
					return
				}
				accepted(m.Data())
				if err := m.Ack(); err != nil {
					b.logf("direct worker ack: %v", err)
				}
			}
		}()
	}
	return &system{stop: func() {
		for _, it := range its {
			it.Stop()
		}
		for range its {
			<-done
		}
		closeAll(conns)
	}}, nil
}

// startDispatcher starts the dispatcher binary with the policy text on the
// bench's server and waits until it is ready. Flags in extra come last, so
// that they override the defaults given here (e.g. --max-held).
func (b *bench) startDispatcher(tag, policy string, extra ...string) (*system, error) {
	pf := filepath.Join(b.tmp, tag+"-policy.yaml")
	if err := os.WriteFile(pf, []byte(policy), 0o644); err != nil {
		return nil, err
	}
	addr, err := cli.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.dispatcherBin,
		"--nats-url", b.url, "--policy-config", pf, "--startup-grace", "200ms",
		"--max-held", "100000", "--log-level", "warn", "--http-addr", addr, "--subject-prefix", b.opt.prefix,
		"--data-dir", filepath.Join(b.tmp, "dispatcher-data"))
	if b.opt.cluster > 0 {
		cmd.Args = append(cmd.Args, "--stream-replicas", strconv.Itoa(b.opt.cluster))
	}
	cmd.Args = append(cmd.Args, extra...)
	d, _, err := startChild(cmd, "dispatcher", filepath.Join(b.tmp, "dispatcher-"+tag+".log"), false)
	if err != nil {
		return nil, err
	}
	b.logf("dispatcher (%s) pid %d, admin %s", tag, d.pid(), addr)
	s := &system{middle: d, admin: addr, stop: func() { d.stop(15 * time.Second) }}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Ready, or ready but for workers, which the bench starts next
			// (docs/design.md, Fleet outage).
			if resp.StatusCode == http.StatusOK || bytes.Contains(body, []byte("no live workers")) {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("dispatcher not ready after 30s (last: %v); see %s", err, d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queues is the part of the dispatcher's /debug/queues the bench reads.
type queues struct {
	Held    int `json:"held"`
	Workers []struct {
		ID string `json:"worker_id"`
	} `json:"workers"`
}

func (s *system) queues() (queues, error) {
	var q queues
	resp, err := http.Get("http://" + s.admin + "/debug/queues")
	if err != nil {
		return q, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return q, fmt.Errorf("/debug/queues: %s", resp.Status)
	}
	return q, json.NewDecoder(resp.Body).Decode(&q)
}

// waitQueues polls /debug/queues (refreshed by the dispatcher once a second)
// until ok holds or timeout passes.
func (s *system) waitQueues(timeout time.Duration, what string, ok func(queues) bool) (queues, error) {
	deadline := time.Now().Add(timeout)
	for {
		q, err := s.queues()
		if err == nil && ok(q) {
			return q, nil
		}
		if time.Now().After(deadline) {
			return q, fmt.Errorf("dispatcher: %s not reached after %v (last %+v, %v)", what, timeout, q, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startWorkers starts b.opt.workers workers of package workerkit on shared
// connections, each with handler h and, when load is not nil, that load, and
// with cfg (its ID and Prefix set here): PlainAcks, HeaderForm.
func (b *bench) startWorkers(h workerkit.Handler, load *workerkit.RankLoad, cfg workerkit.Config) (stop func(), conns []*nats.Conn, err error) {
	conns, err = b.connect("bench-worker", workerConns)
	if err != nil {
		return nil, nil, err
	}
	var ws []*workerkit.Worker
	stop = func() {
		for _, w := range ws {
			_ = w.Close()
		}
		closeAll(conns)
	}
	for i := range b.opt.workers {
		cfg.ID, cfg.Prefix = workerID(i), b.opt.prefix
		w, err := workerkit.New(conns[i%len(conns)], cfg, h, zerolog.Nop())
		if err != nil {
			stop()
			return nil, nil, err
		}
		if load != nil {
			if err := w.SetLoad(0, *load); err != nil {
				stop()
				return nil, nil, err
			}
		}
		if err := w.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	return stop, conns, flushAll(conns)
}

// workerFleet is how the workers of a fairdispatch system are configured: the
// dispatch form they ask for and how they acknowledge.
type workerFleet struct {
	headerForm bool // the header form, not the compact form (workerkit.Config.HeaderForm)
	plainAcks  bool // plain acknowledgements, not confirmed ones (workerkit.Config.PlainAcks)
}

// startFair sets up fairdispatch for the throughput and latency runs: the
// dispatcher with the four-class policy and workers that accept at once and
// acknowledge at once, in the dispatch form and the acknowledgement kind of f.
func (b *bench) startFair(f workerFleet) (*system, []*nats.Conn, error) {
	if err := b.resetStreams(); err != nil {
		return nil, nil, err
	}
	var extra []string
	if b.opt.profileHop {
		extra = append(extra, "--pprof")
	}
	s, err := b.startDispatcher("throughput", throughputPolicy, extra...)
	if err != nil {
		return nil, nil, err
	}
	h := workerkit.HandlerFunc(func(r *workerkit.Request) bool {
		acceptedAfter(r.Data, int64(r.QueuedMs))
		if err := r.Done(); err != nil {
			b.logf("fairdispatch worker ack: %v", err)
		}
		return true
	})
	stopWorkers, conns, err := b.startWorkers(h, nil, workerkit.Config{PlainAcks: f.plainAcks, HeaderForm: f.headerForm})
	if err != nil {
		s.stop()
		return nil, nil, err
	}
	stopD := s.stop
	s.stop = func() {
		stopWorkers()
		stopD()
	}
	if _, err := s.waitQueues(20*time.Second, "all workers live", func(q queues) bool { return len(q.Workers) == b.opt.workers }); err != nil {
		s.stop()
		return nil, nil, err
	}
	return s, conns, nil
}
