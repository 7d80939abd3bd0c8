package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/internal/spin"
	"fairdispatch/loadgen"
	"fairdispatch/mockworker"
)

// The seed's burst: premium and regular requests of 512 tokens, one output
// token, published together (alternating) to one worker running 4 sequences.
const (
	burstPerClass = 320
	burstISL      = 512
	burstSeqs     = 4
)

// burstResult is one system's run of the burst.
type burstResult struct {
	System string `json:"system"`
	// PremiumOfFirst is how many of the first burstPerClass completions were premium.
	PremiumOfFirst int     `json:"premium_of_first_320"`
	Completed      int     `json:"completed"`
	Seconds        float64 `json:"seconds"` // first publication to last completion
	// Finished holds, per class, the completion times in seconds since the
	// first publication, in order.
	Finished map[string][]float64 `json:"finished_s"`
	Error    string               `json:"error,omitempty"`
}

// burstFair runs the burst through the dispatcher with configs/policy-classes.yaml
// and one mockworker engine; with capacity > 0 the engine reports it as
// max_active_requests (docs/protocol.md, Load report).
func (b *bench) burstFair(capacity uint64) (res burstResult) {
	res = burstResult{System: "fairdispatch"}
	if capacity > 0 {
		res.System = fmt.Sprintf("fairdispatch, max_active_requests %d", capacity)
	}
	fail := func(what string, err error) burstResult {
		res.Error = fmt.Sprintf("%s: %v", what, err)
		b.logf("burst %s: %s", res.System, res.Error)
		return res
	}
	loadConn, stop, err := b.mockBehindDispatcher("burst", mockworker.Config{MaxNumSeqs: burstSeqs,
		PrefillTokensPerSec: b.opt.burstTPS, MaxActiveRequests: capacity})
	if err != nil {
		return fail("set-up", err)
	}
	defer stop()
	r, err := loadgen.Run(context.Background(), loadConn, loadgen.Config{
		Prefix:  b.opt.prefix,
		Classes: []loadgen.ClassCount{{Class: "premium", Count: burstPerClass}, {Class: "regular", Count: burstPerClass}},
		ISL:     burstISL, Order: loadgen.OrderAlternating, Timeout: 2 * time.Minute,
	}, zerolog.Nop())
	if r == nil {
		return fail("loadgen", err)
	}
	res.PremiumOfFirst = r.PrefixShare(burstPerClass)["premium"]
	res.Completed = len(r.Completions)
	res.Finished = map[string][]float64{}
	var first time.Time
	for _, c := range r.Completions {
		if first.IsZero() || c.PublishedAt.Before(first) {
			first = c.PublishedAt
		}
	}
	for _, c := range r.Completions {
		at := c.FinishedAt.Sub(first).Seconds()
		res.Finished[c.Class] = append(res.Finished[c.Class], at)
		res.Seconds = max(res.Seconds, at)
	}
	for _, v := range res.Finished {
		slices.Sort(v)
	}
	if err != nil {
		return fail("loadgen", err)
	}
	return res
}

// mockBehindDispatcher starts a dispatcher (named name) on
// configs/policy-classes.yaml with fresh streams and one mock engine, "mock-1",
// with cfg's simulation and PreciseTimers, and waits until the engine is live.
// It returns a connection for the load generator and a stop function.
func (b *bench) mockBehindDispatcher(name string, cfg mockworker.Config) (*nats.Conn, func(), error) {
	policy, err := os.ReadFile(filepath.Join(b.modRoot, "configs", "policy-classes.yaml"))
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	if err := b.resetStreams(); err != nil {
		return nil, nil, fmt.Errorf("reset streams: %w", err)
	}
	s, err := b.startDispatcher(name, string(policy))
	if err != nil {
		return nil, nil, fmt.Errorf("start dispatcher: %w", err)
	}
	conns, err := b.connect("bench-"+name, 2)
	if err != nil {
		s.stop()
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	cfg.ID, cfg.Prefix, cfg.PreciseTimers = "mock-1", b.opt.prefix, true
	m, err := mockworker.New(conns[0], cfg, zerolog.Nop())
	if err == nil {
		err = m.Start()
	}
	if err != nil {
		closeAll(conns)
		s.stop()
		return nil, nil, fmt.Errorf("mock worker: %w", err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
		closeAll(conns)
		s.stop()
	}
	if _, err := s.waitQueues(20*time.Second, "mock worker live", func(q queues) bool { return len(q.Workers) == 1 }); err != nil {
		stop()
		return nil, nil, fmt.Errorf("worker: %w", err)
	}
	return conns[1], stop, nil
}

// burstDirect runs the burst through the direct work queue: one consumer
// that runs up to 4 requests at a time, in the order it pulls them, each for
// burstISL / PrefillTokensPerSec seconds like the mock engine.
func (b *bench) burstDirect() (res burstResult) {
	res = burstResult{System: "direct work queue", Finished: map[string][]float64{}}
	fail := func(what string, err error) burstResult {
		res.Error = fmt.Sprintf("%s: %v", what, err)
		b.logf("burst direct: %s", res.Error)
		return res
	}
	if err := b.resetStreams(); err != nil {
		return fail("reset streams", err)
	}
	conns, err := b.connect("bench-burst-direct", 1)
	if err != nil {
		return fail("connect", err)
	}
	defer closeAll(conns)
	js, err := jetstream.New(conns[0])
	if err != nil {
		return fail("jetstream", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(ctx, b.opt.names.ReqStream(), jetstream.ConsumerConfig{
		Durable: "burst", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 10000, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fail("consumer", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fail("consumer", err)
	}
	defer it.Stop()

	t := newTracker(2 * burstPerClass)
	var (
		mu    sync.Mutex
		order []string // classes in completion order
		times []float64
	)
	fifo := make(chan jetstream.Msg, 4*burstPerClass)
	go func() {
		defer close(fifo)
		for {
			msg, err := it.Next()
			if err != nil {
				return
			}
			fifo <- msg
		}
	}()
	service := time.Duration(float64(burstISL) / b.opt.burstTPS * float64(time.Second))
	for range burstSeqs {
		go func() {
			for msg := range fifo {
				spin.Until(time.Now().Add(service)) // as precise as the mock engine's PreciseTimers
				_ = msg.Ack()
				class := msg.Subject()[len(b.opt.names.Req("")):]
				mu.Lock()
				order = append(order, class)
				times = append(times, float64(t.now())/1e9)
				mu.Unlock()
				accepted(msg.Data())
			}
		}()
	}
	subjects := []string{b.opt.names.Req("premium"), b.opt.names.Req("regular")}
	if err := b.pub.run(ctx, t, subjects, burstISL, 128, 0); err != nil {
		return fail("publish", err)
	}
	if err := t.wait(time.Until(deadlineOf(ctx))); err != nil {
		return fail("wait", err)
	}
	mu.Lock()
	defer mu.Unlock()
	first := float64(slices.Min(t.pubAt)) / 1e9
	for i, c := range order {
		if i < burstPerClass && c == "premium" {
			res.PremiumOfFirst++
		}
		res.Finished[c] = append(res.Finished[c], times[i]-first)
		res.Seconds = max(res.Seconds, times[i]-first)
	}
	res.Completed = len(order)
	return res
}
