package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"fairdispatch/wire"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A request's body starts with a 4-byte run tag and an 8-byte index, so that
// the worker side can tell which run and request it accepted; the rest is
// padding up to the body size.
const bodyHeader = 12

// tracker follows one run: when each request was published and first
// accepted by a worker. Its methods are safe for concurrent use.
type tracker struct {
	tag   uint32
	n     int
	base  time.Time
	pubAt []int64 // ns since base, set before publication
	accAt []int64 // ns since base of the first acceptance, 0 = none yet
	// sentMs is, per request, its Dispatch-Queued-Ms + 1 (the dispatcher's
	// milliseconds from publication to its send) when a fairdispatch worker
	// accepted it; 0 = unknown.
	sentMs []int64

	count  atomic.Int64
	dups   atomic.Int64
	last   atomic.Int64 // ns since base of the latest acceptance
	maxGap atomic.Int64
	done   chan struct{}
}

var (
	runTag  atomic.Uint32
	current atomic.Pointer[tracker] // the run the workers report to
	stale   atomic.Int64            // acceptances of no current run
)

// newTracker makes the tracker of a run of n requests and makes it current.
func newTracker(n int) *tracker {
	t := &tracker{tag: runTag.Add(1), n: n, base: time.Now(),
		pubAt: make([]int64, n), accAt: make([]int64, n), sentMs: make([]int64, n), done: make(chan struct{})}
	if n == 0 {
		close(t.done)
	}
	current.Store(t)
	return t
}

func (t *tracker) now() int64 { return max(1, time.Since(t.base).Nanoseconds()) }

// body builds request i's body of size bytes.
func (t *tracker) body(i, size int) []byte {
	b := make([]byte, max(size, bodyHeader))
	binary.LittleEndian.PutUint32(b, t.tag)
	binary.LittleEndian.PutUint64(b[4:], uint64(i))
	return b
}

// accepted is called by every worker of every system for every request it
// accepts, with the request's body.
func accepted(body []byte) { acceptedAfter(body, -1) }

// acceptedAfter is accepted for a request the dispatcher sent queuedMs after
// its publication (Dispatch-Queued-Ms; -1 when unknown).
func acceptedAfter(body []byte, queuedMs int64) {
	t := current.Load()
	if t == nil || len(body) < bodyHeader || binary.LittleEndian.Uint32(body) != t.tag {
		stale.Add(1)
		return
	}
	i := binary.LittleEndian.Uint64(body[4:])
	if i >= uint64(t.n) {
		stale.Add(1)
		return
	}
	now := t.now()
	if !atomic.CompareAndSwapInt64(&t.accAt[i], 0, now) {
		t.dups.Add(1)
		return
	}
	if queuedMs >= 0 {
		atomic.StoreInt64(&t.sentMs[i], queuedMs+1)
	}
	prev := t.last.Swap(now)
	for g := now - prev; g > 0; {
		m := t.maxGap.Load()
		if g <= m || t.maxGap.CompareAndSwap(m, g) {
			break
		}
	}
	if t.count.Add(1) == int64(t.n) {
		close(t.done)
	}
}

// wait waits until every request was accepted or timeout passes.
func (t *tracker) wait(timeout time.Duration) error {
	select {
	case <-t.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%d of %d requests accepted after %v", t.count.Load(), t.n, timeout)
	}
}

// runStats is what a finished run measured.
type runStats struct {
	Requests   int     `json:"requests"`
	Accepted   int     `json:"accepted"`
	Duplicates int     `json:"duplicates"`
	Seconds    float64 `json:"seconds"`        // first publication to last acceptance
	Rate       float64 `json:"requests_per_s"` // accepted / Seconds
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	P999Ms     float64 `json:"p999_ms"`
	MaxMs      float64 `json:"max_ms"`
	MaxGapMs   float64 `json:"longest_gap_ms"` // longest time without an acceptance, from the first publication
	PubErrors  int64   `json:"publish_errors"`
	// Tail splits the requests at or above p99 where the dispatcher says when
	// it sent them (fairdispatch only): nil otherwise.
	Tail *tailSplit `json:"p99_tail,omitempty"`
}

// tailSplit is where the slowest 1% of a run's requests spent their time:
// from publication to the dispatcher's send (JetStream's delivery to the
// dispatcher and its queue, by Dispatch-Queued-Ms, whole milliseconds), and
// from the send to the worker's acceptance (the handshake's trip).
type tailSplit struct {
	Requests      int     `json:"requests"`
	BeforeSendMs  float64 `json:"before_send_ms"` // median over the tail
	AfterSendMs   float64 `json:"after_send_ms"`  // median over the tail
	BeforeShare   float64 `json:"before_send_share"`
	AllBeforeMs   float64 `json:"all_before_send_ms"` // median over every request, for comparison
	AllAfterMs    float64 `json:"all_after_send_ms"`
	SlowestBefore float64 `json:"slowest_before_send_ms"`
}

func (t *tracker) stats() runStats {
	s := runStats{Requests: t.n, Accepted: int(t.count.Load()), Duplicates: int(t.dups.Load()),
		MaxGapMs: ms(t.maxGap.Load())}
	var lat []int64
	var split []splitRec
	var first, last int64 = -1, 0
	for i := range t.n {
		p, a := atomic.LoadInt64(&t.pubAt[i]), atomic.LoadInt64(&t.accAt[i])
		if p > 0 && (first < 0 || p < first) {
			first = p
		}
		if a > 0 {
			last = max(last, a)
			lat = append(lat, a-p)
			if sent := atomic.LoadInt64(&t.sentMs[i]); sent > 0 {
				split = append(split, splitRec{a - p, (sent - 1) * 1e6})
			}
		}
	}
	s.Tail = tailOf(split)
	if first >= 0 && last > first {
		s.Seconds = float64(last-first) / 1e9
		s.Rate = float64(s.Accepted) / s.Seconds
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))])
	}
	s.P50Ms, s.P99Ms, s.P999Ms = q(0.50), q(0.99), q(0.999)
	if len(lat) > 0 {
		s.MaxMs = ms(lat[len(lat)-1])
	}
	return s
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// splitRec is one request's latency and its part before the dispatcher's send.
type splitRec struct{ lat, before int64 }

// tailOf splits the requests at or above the 99th percentile of latency; nil
// when fewer than 100 requests carry the dispatcher's time.
func tailOf(recs []splitRec) *tailSplit {
	if len(recs) < 100 {
		return nil
	}
	slices.SortFunc(recs, func(a, b splitRec) int { return int(a.lat - b.lat) })
	median := func(rs []splitRec, f func(splitRec) int64) float64 {
		v := make([]int64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return ms(v[len(v)/2])
	}
	before := func(r splitRec) int64 { return min(r.before, r.lat) }
	after := func(r splitRec) int64 { return r.lat - min(r.before, r.lat) }
	tail := recs[len(recs)*99/100:]
	ts := &tailSplit{Requests: len(tail), BeforeSendMs: median(tail, before), AfterSendMs: median(tail, after),
		AllBeforeMs: median(recs, before), AllAfterMs: median(recs, after)}
	var b, total int64
	for _, r := range tail {
		b += before(r)
		total += r.lat
		ts.SlowestBefore = max(ts.SlowestBefore, ms(before(r)))
	}
	if total > 0 {
		ts.BeforeShare = float64(b) / float64(total)
	}
	return ts
}

// publisher publishes requests to JetStream asynchronously, with at most
// window publications awaiting their acknowledgement; a failed publication
// is published again.
type publisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	window chan struct{} // a slot per publication awaiting its ack
	retry  chan *nats.Msg
	errs   atomic.Int64
	sent   atomic.Int64
	keys   int // Dispatch-Fairness-Key values of the next runs, in turn; 0 or 1: none sent
}

func newPublisher(url string, window int) (*publisher, error) {
	nc, err := nats.Connect(url, nats.Name("bench-publisher"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	p := &publisher{nc: nc, window: make(chan struct{}, window), retry: make(chan *nats.Msg, window)}
	p.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(2*window),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { <-p.window }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, _ error) {
			p.errs.Add(1)
			p.retry <- &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
			<-p.window
		}))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

func (p *publisher) close() { p.nc.Close() }

// message is request i of run t: one of subjects in turn, Dispatch-ISL-Tokens
// isl (omitted when 0), a body of size bytes, and with keys > 1 the
// Dispatch-Fairness-Key k<i mod keys>.
func message(t *tracker, i int, subjects []string, isl uint64, size, keys int) *nats.Msg {
	m := &nats.Msg{Subject: subjects[i%len(subjects)], Data: t.body(i, size)}
	if isl > 0 {
		m.Header = nats.Header{wire.HeaderISLTokens: []string{strconv.FormatUint(isl, 10)}}
	}
	if keys > 1 {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header[wire.HeaderFairnessKey] = []string{"k" + strconv.Itoa(i%keys)}
	}
	return m
}

// run publishes t's requests; rate > 0 paces them at rate per second,
// otherwise as fast as acknowledgements allow. It returns when every
// publication is acknowledged.
func (p *publisher) run(ctx context.Context, t *tracker, subjects []string, isl uint64, size int, rate float64) error {
	start := time.Now()
	send := func(m *nats.Msg) error {
		select {
		case p.window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := p.js.PublishMsgAsync(m); err != nil {
			<-p.window
			return err
		}
		p.sent.Add(1)
		return nil
	}
	for i := 0; i < t.n; i++ {
		for more := true; more; {
			select {
			case m := <-p.retry:
				if err := send(m); err != nil {
					return err
				}
			default:
				more = false
			}
		}
		if rate > 0 {
			for float64(i) > time.Since(start).Seconds()*rate {
				time.Sleep(500 * time.Microsecond)
			}
		}
		m := message(t, i, subjects, isl, size, p.keys)
		atomic.StoreInt64(&t.pubAt[i], t.now())
		if err := send(m); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
	}
	for len(p.window) > 0 || len(p.retry) > 0 {
		select {
		case m := <-p.retry:
			if err := send(m); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return errors.Join(ctx.Err())
	}
	return nil
}
