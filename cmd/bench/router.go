package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// routerAckWait is the AckWait of a baseline router's consumer; dispatches
// carry it as Dispatch-Ack-Wait-Ms, and the workers keep requests alive
// with +WPI every third of it.
const routerAckWait = 60 * time.Second

// routerHandshakeTimeout is how long a router waits for a worker's answer
// before it places the request again.
const routerHandshakeTimeout = 2 * time.Second

// dispatchHeaders are the headers a dispatch sets (docs/protocol.md,
// Dispatch handshake): a producer's variant of any is dropped.
var dispatchHeaders = []string{wire.HeaderRequestID, wire.HeaderClass, wire.HeaderDPRank, wire.HeaderSeq,
	wire.HeaderCost, wire.HeaderQueuedMs, wire.HeaderAck, wire.HeaderAckWaitMs}

// pending is a dispatch awaiting the worker's answer.
type pending struct {
	msg    jetstream.Msg
	w      *rworker
	id     string
	seq    uint64
	sentAt time.Time
}

// router is a baseline router process (routerRole).
type router struct {
	nc    *nats.Conn
	names naming.Names
	inbox string

	mu      sync.Mutex
	pick    *picker
	pending map[string]*pending // by reply token
	token   uint64
	retries int
}

// routerRole runs a baseline router (routerpick.go) until SIGTERM or until
// its standard input closes: it learns the workers from their load reports,
// their caches from the KV stream (policy kv), the end of requests from
// completion records, and once --workers workers reported it prints
// "ready" and pulls the request stream through its own durable consumer,
// placing each request at once with the dispatch handshake.
func routerRole(args []string) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	url := fs.String("nats-url", "", "NATS URL")
	prefix := fs.String("subject-prefix", naming.DefaultPrefix, "subject prefix")
	policy := fs.String("policy", policyRR, "rr, ll or kv")
	workers := fs.Int("workers", 1, "workers to wait for before pulling")
	blockSize := fs.Int("block-size", 64, "KV block size in tokens")
	weight := fs.Float64("overlap-score-weight", 1, "kv: Dynamo's overlap_score_weight")
	seed := fs.Uint64("seed", 1, "seed of the tie breaks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names, err := naming.New(*prefix)
	if err != nil {
		return err
	}
	p, err := newPicker(*policy, *blockSize, *weight, *seed)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf) // EOF when the bench goes
		stop()
	}()
	nc, js, err := connectJS(*url, nats.Name("bench-router-"+*policy), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	r := &router{nc: nc, names: names, inbox: nc.NewInbox(), pick: p, pending: map[string]*pending{}}
	if err := r.subscribe(ctx, *policy == policyKV); err != nil {
		return err
	}
	for {
		r.mu.Lock()
		n := len(r.pick.workers)
		r.mu.Unlock()
		if n >= *workers {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	it, err := pullRequests(ctx, js, names, "router", routerAckWait, 200000, 256)
	if err != nil {
		return err
	}
	go r.expire(ctx)
	fmt.Println("ready")
	err = eachRequest(ctx, it, r.place)
	r.mu.Lock()
	r.retries += r.pick.redelivered
	if r.retries > 0 {
		// The bench reads this line (fleetRun.RouterRetries).
		fmt.Fprintf(os.Stderr, "router: %d dispatches placed again (refused, or unanswered for %v)\n", r.retries, routerHandshakeTimeout)
	}
	r.mu.Unlock()
	return err
}

// subscribe follows load reports, completion records, handshake answers
// and, with kv, the KV stream from its start.
func (r *router) subscribe(ctx context.Context, kv bool) error {
	subs := []struct {
		subject string
		f       nats.MsgHandler
	}{
		{r.names.LoadAll(), func(m *nats.Msg) {
			var rep wire.LoadReport
			if err := wire.DecodeLoadReport(m.Data, &rep); err != nil {
				return
			}
			r.mu.Lock()
			r.pick.report(&rep)
			r.mu.Unlock()
		}},
		{r.names.DoneAll(), func(m *nats.Msg) {
			var c wire.Completion
			if err := json.Unmarshal(m.Data, &c); err != nil {
				return
			}
			r.mu.Lock()
			r.pick.completed(c.RequestID, c.WorkerID, c.Seq)
			r.mu.Unlock()
		}},
		{r.inbox + ".*", r.answer},
	}
	for _, s := range subs {
		sub, err := r.nc.Subscribe(s.subject, s.f)
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s.subject, err)
		}
	}
	if !kv {
		return r.nc.Flush()
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, r.names.KVStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("kv stream: %w", err)
	}
	_, err = cons.Consume(func(m jetstream.Msg) {
		id := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
		ev, err := wire.ParseKVEvent(m.Data())
		if err != nil {
			fmt.Fprintf(os.Stderr, "router: kv event of %s: %v\n", id, err)
			return
		}
		r.mu.Lock()
		err = r.pick.kvEvent(id, &ev)
		r.mu.Unlock()
		if err != nil {
			fmt.Fprintf(os.Stderr, "router: kv event of %s: %v\n", id, err)
		}
	})
	if err != nil {
		return fmt.Errorf("kv stream: %w", err)
	}
	return r.nc.Flush()
}

// place chooses a worker for m and sends it the dispatch.
func (r *router) place(m jetstream.Msg) {
	h := m.Headers()
	isl, _ := strconv.Atoi(strings.TrimSpace(h.Get(wire.HeaderISLTokens)))
	var hashes []uint64
	if v := h.Get(wire.HeaderBlockHashes); v != "" {
		hashes, _ = wire.DecodeHashes(nil, v)
	}
	id := h.Get(jetstream.MsgIDHeader)
	class := m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
	queued := int64(0)
	if md, err := m.Metadata(); err == nil {
		queued = max(0, time.Since(md.Timestamp).Milliseconds())
	}

	r.mu.Lock()
	w, overlap := r.pick.pick(isl, hashes)
	if w == nil {
		r.mu.Unlock()
		_ = m.NakWithDelay(100 * time.Millisecond)
		return
	}
	cost := uint64(max(1, isl-overlap*r.pick.blockSize))
	seq := r.pick.dispatched(w, id, isl, hashes, cost)
	r.token++
	token := strconv.FormatUint(r.token, 36)
	r.pending[token] = &pending{msg: m, w: w, id: id, seq: seq, sentAt: time.Now()}
	r.mu.Unlock()

	out := nats.Header{}
	for k, v := range h {
		out[k] = v
	}
	for _, k := range dispatchHeaders {
		for name := range out {
			if strings.EqualFold(name, k) {
				delete(out, name)
			}
		}
	}
	out[wire.HeaderRequestID] = []string{id}
	out[wire.HeaderClass] = []string{class}
	out[wire.HeaderDPRank] = []string{"0"}
	out[wire.HeaderSeq] = []string{strconv.FormatUint(seq, 10)}
	out[wire.HeaderCost] = []string{strconv.FormatUint(cost, 10)}
	out[wire.HeaderQueuedMs] = []string{strconv.FormatInt(queued, 10)}
	out[wire.HeaderAck] = []string{m.Reply()}
	out[wire.HeaderAckWaitMs] = []string{strconv.FormatInt(routerAckWait.Milliseconds(), 10)}
	if err := r.nc.PublishMsg(&nats.Msg{Subject: r.names.Work(w.id), Reply: r.inbox + "." + token, Header: out, Data: m.Data()}); err != nil {
		fmt.Fprintf(os.Stderr, "router: dispatch %s: %v\n", id, err)
	}
}

// answer handles a worker's answer to a dispatch: accepted, or refused
// (placed again a little later).
func (r *router) answer(m *nats.Msg) {
	token := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	r.mu.Lock()
	p, ok := r.pending[token]
	delete(r.pending, token)
	refused := ok && (m.Header.Get(wire.HeaderStatus) != "" || m.Header.Get("Status") != "")
	if refused {
		r.pick.undo(p.w, p.id, p.seq)
		r.retries++
	}
	r.mu.Unlock()
	if refused {
		time.AfterFunc(20*time.Millisecond, func() { r.place(p.msg) })
	}
}

// expire places again the dispatches unanswered for the handshake timeout.
func (r *router) expire(ctx context.Context) {
	t := time.NewTicker(routerHandshakeTimeout / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var again []jetstream.Msg
		r.mu.Lock()
		for token, p := range r.pending {
			if time.Since(p.sentAt) > routerHandshakeTimeout {
				delete(r.pending, token)
				r.pick.undo(p.w, p.id, p.seq)
				r.retries++
				again = append(again, p.msg)
			}
		}
		r.mu.Unlock()
		for _, m := range again {
			r.place(m)
		}
	}
}
