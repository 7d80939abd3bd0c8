package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultPullWait is the expiry of one pull request when Config.PullWait is 0.
const DefaultPullWait = time.Second

// Retry delays after a failed pull: doubling from the first to the last.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = 2 * time.Second
)

// ErrRunning is returned by Run when another Run of the same Consumer is active.
var ErrRunning = errors.New("ingest: consumer already running")

// Config configures the durable pull consumer of the request stream.
type Config struct {
	Stream   string        // request stream, e.g. "DISPATCH_REQ"; required
	Durable  string        // durable consumer name, e.g. "dispatcher"; required
	AckWait  time.Duration // consumer AckWait (--ack-wait, e.g. 30s); > 0
	MaxHeld  int           // --max-held: most deliveries held by the dispatcher at once; > 0
	InFlight int           // extra MaxAckPending room for messages accepted by workers and not yet acked; >= 0
	Batch    int           // most messages asked for by one pull request, e.g. 256; > 0
	// PullWait is how long one pull request waits on the server for messages
	// before it expires and the next is sent; 0 means DefaultPullWait. It bounds
	// how long Run takes to return after Stop (about PullWait + 1 s at most) and how
	// long a pull lost in a reconnection goes unnoticed.
	PullWait time.Duration
	// Gate, when not nil, stops Run from pulling while it is closed (a fleet
	// outage, docs/design.md, Fleet outage); nil pulls always.
	Gate *Gate
	// HandBacks, when set, sends every hand-back (a delivery's Msg.Nak) so that
	// the server confirms it, and counts it (HandBacks.Wait).
	HandBacks *HandBacks
}

// MaxAckPending returns the consumer's MaxAckPending: MaxHeld + InFlight.
func (c Config) MaxAckPending() int { return c.MaxHeld + c.InFlight }

func (c Config) validate() error {
	var errs []error
	if c.Stream == "" {
		errs = append(errs, errors.New("stream is empty"))
	}
	if c.Durable == "" {
		errs = append(errs, errors.New("durable is empty"))
	}
	if c.AckWait <= 0 {
		errs = append(errs, fmt.Errorf("ack wait %v is not positive", c.AckWait))
	}
	if c.MaxHeld <= 0 {
		errs = append(errs, fmt.Errorf("max held %d is not positive", c.MaxHeld))
	}
	if c.InFlight < 0 {
		errs = append(errs, fmt.Errorf("in-flight room %d is negative", c.InFlight))
	}
	if c.MaxHeld > 0 && c.InFlight >= 0 && c.MaxHeld > math.MaxInt32-c.InFlight {
		errs = append(errs, fmt.Errorf("max held %d + in-flight room %d exceeds %d", c.MaxHeld, c.InFlight, math.MaxInt32))
	}
	if c.Batch <= 0 {
		errs = append(errs, fmt.Errorf("batch %d is not positive", c.Batch))
	}
	if c.PullWait < 0 {
		errs = append(errs, fmt.Errorf("pull wait %v is negative", c.PullWait))
	}
	return errors.Join(errs...)
}

// Delivery is one request message handed to the actor.
type Delivery struct {
	Msg          Msg
	StreamSeq    uint64    // stream sequence: identifies the request across redeliveries
	NumDelivered uint64    // 1 on first delivery
	Published    time.Time // JetStream publication timestamp (docs/design.md, Snapshot arrival)
	Headers      Headers
	// Err is the *HeaderError of a malformed header (docs/protocol.md, Request headers: bad_request), or nil.
	// Headers is then partially filled: every header that did decode, in
	// particular MsgID and ReplyTo when they are valid.
	Err error
}

// batches holds the slices Run hands out, given back by Recycle: a
// Delivery is about 470 bytes, and growing a fresh slice for every batch
// allocated more than the rest of a request's way through the dispatcher
// (docs/bench.md, Issue 27: the hop).
var batches = sync.Pool{New: func() any { b := make([]Delivery, 0, 64); return &b }}

// maxRecycled bounds the capacity of a slice Recycle keeps.
const maxRecycled = 4096

func newBatch() []Delivery { return (*batches.Get().(*[]Delivery))[:0] }

// Recycle gives back a slice received from Run, so that Run fills it again
// instead of allocating another. The caller must hold no pointer into it
// any more: copies of its elements' fields (strings, slices, the Msg) stay
// good. Recycling is optional.
func Recycle(b []Delivery) {
	if cap(b) == 0 || cap(b) > maxRecycled {
		return
	}
	clear(b) // let go of what the deliveries point to
	b = b[:0]
	batches.Put(&b)
}

// Consumer pulls request messages from the durable consumer with explicit flow
// control: at most MaxHeld deliveries are held (handed out and not released) at
// once. Run is its only goroutine; Release, Held and Stop may be called from any
// goroutine.
type Consumer struct {
	js   jetstream.JetStream
	cons jetstream.Consumer
	cfg  Config
	log  zerolog.Logger

	held    atomic.Int64  // deliveries received by Run and not released
	room    chan struct{} // capacity 1: Release signals Run
	stop    chan struct{} // closed by Stop
	stopped sync.Once
	running atomic.Bool

	acks     natsAcker
	subjects map[string]string // interned request subjects (Run's goroutine only)
}

// maxInterned bounds the request subjects a Consumer interns: one per class
// token in use, so far more than any policy has; beyond it, subjects are kept
// as received.
const maxInterned = 4096

// NewConsumer creates or updates the durable pull consumer c.Durable on stream
// c.Stream: explicit ack, AckWait c.AckWait, MaxAckPending c.MaxHeld+c.InFlight,
// deliver all. The stream must exist. No filter subject is set: the request stream
// is a work-queue stream with this single consumer.
func NewConsumer(ctx context.Context, js jetstream.JetStream, c Config, log zerolog.Logger) (*Consumer, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("ingest: config: %w", err)
	}
	if c.PullWait == 0 {
		c.PullWait = DefaultPullWait
	}
	if c.Batch > c.MaxHeld {
		c.Batch = c.MaxHeld
	}
	cs := &Consumer{
		js:   js,
		cfg:  c,
		log:  log.With().Str("component", "ingest").Logger(),
		room: make(chan struct{}, 1),
		stop: make(chan struct{}),
		acks: natsAcker{nc: js.Conn(), hb: c.HandBacks},

		subjects: make(map[string]string),
	}
	if err := cs.ensure(ctx); err != nil {
		return nil, err
	}
	return cs, nil
}

// ensure creates or updates the durable consumer and keeps its handle.
func (c *Consumer) ensure(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxAckPending: c.cfg.MaxAckPending(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("ingest: create or update consumer %q on stream %q: %w", c.cfg.Durable, c.cfg.Stream, err)
	}
	c.cons = cons
	return nil
}

// Release tells the consumer that n held deliveries have left the dispatcher
// (accepted by a worker, dead-lettered, handed back, or merged into an already
// held request as a redelivery). Every Delivery must be released exactly once.
func (c *Consumer) Release(n int) {
	if n <= 0 {
		return
	}
	if c.held.Add(-int64(n)) < 0 {
		c.log.Error().Int("released", n).Msg("released more deliveries than were held")
		c.held.Store(0)
	}
	select {
	case c.room <- struct{}{}:
	default:
	}
}

// Held returns the number of deliveries received and not released: those handed
// out to the actor plus those Run is about to hand out.
func (c *Consumer) Held() int { return int(c.held.Load()) }

// Stop stops pulling: Run hands back (NAKs) what it received and has not handed
// out, waits for the pull request it has open to end, and returns nil. Deliveries
// already handed out, received or still in the channel, are the receiver's to
// hand back (dispatcher.Actor.HandBack). Safe to call more than once and from
// any goroutine.
func (c *Consumer) Stop() { c.stopped.Do(func() { close(c.stop) }) }

// Run pulls until ctx ends or Stop is called, sending batches of decoded
// deliveries to out; it returns nil after Stop, ctx.Err() when ctx ends, and
// ErrRunning when another Run is active. A slice sent on out belongs to the
// receiver.
//
// Flow control: Run has at most one pull request open, for at most
// min(Batch, MaxHeld-Held()) messages, so Held never exceeds MaxHeld. While Held
// is below MaxHeld a pull request is always open, except between the end of one
// and the send of the next (and while a failed pull waits to be retried, from
// 50 ms doubling to 2 s). Run receives messages while it waits for out, so a slow
// receiver does not leave the server without a pull. While Config.Gate is
// closed Run opens no pull: the pull open when it closes runs to its end (at
// most PullWait) and what it brings is handed out as usual. Failures (lost connection,
// deleted consumer, which is created again) are logged and retried; they never
// end Run.
func (c *Consumer) Run(ctx context.Context, out chan<- []Delivery) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)

	var (
		batch   jetstream.MessageBatch
		msgs    <-chan jetstream.Msg // nil: no pull open
		pending []Delivery           // received, not yet sent on out
		retry   *time.Timer
		retryC  <-chan time.Time // non-nil while waiting to retry
		delay   time.Duration
	)
	failed := func(err error) {
		if delay == 0 {
			delay = retryFirst
		} else {
			delay = min(2*delay, retryMax)
		}
		c.log.Warn().Err(err).Dur("retry_in", delay).Msg("pull failed")
		if consumerGone(err) {
			if err := c.ensure(ctx); err != nil {
				c.log.Error().Err(err).Msg("re-create consumer")
			}
		}
		if retry == nil {
			retry = time.NewTimer(delay)
		} else {
			retry.Reset(delay)
		}
		retryC = retry.C
	}
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()

	var gateC <-chan struct{} // closed at the gate's next change; nil without a gate
	for {
		shut := false
		if c.cfg.Gate != nil {
			shut, gateC = c.cfg.Gate.State()
		}
		if msgs == nil && retryC == nil && !shut {
			if room := c.cfg.MaxHeld - c.Held(); room > 0 {
				b, err := c.cons.Fetch(min(room, c.cfg.Batch), jetstream.FetchMaxWait(c.cfg.PullWait))
				if err != nil {
					failed(err)
				} else {
					batch, msgs = b, b.Messages()
				}
			}
		}
		var send chan<- []Delivery
		if len(pending) > 0 {
			send = out
		}
		select {
		case m, ok := <-msgs:
			if !ok {
				if err := batch.Error(); err != nil {
					failed(err)
				} else {
					delay = 0
				}
				batch, msgs = nil, nil
				continue
			}
			if d, ok := c.decode(m); ok {
				c.held.Add(1)
				if pending == nil {
					pending = newBatch()
				}
				pending = append(pending, d)
			}
		case send <- pending:
			pending = nil
		case <-c.room:
		case <-gateC:
		case <-retryC:
			retryC = nil
		case <-c.stop:
			c.shutdown(pending, msgs)
			return nil
		case <-ctx.Done():
			c.shutdown(pending, msgs)
			return ctx.Err()
		}
	}
}

// consumerGone reports whether a failed pull means the durable consumer may no
// longer exist, so it must be created again. A pull open when the consumer is
// deleted ends with ErrConsumerDeleted; a pull sent after the deletion reaches no
// consumer at all and ends with no responders (the server answers 503), which
// is also what a JetStream outage looks like: creating the consumer then fails
// and is logged, and the next failure tries again.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, nats.ErrNoResponders)
}

// shutdown hands back what Run received and did not hand out, including what
// the open pull request (msgs, if any) still delivers. It waits for that pull to
// end first (within PullWait, or PullWait + 1 s at worst when the server's expiry
// notice is lost): a NAK while our own pull is open would be redelivered straight
// into it.
func (c *Consumer) shutdown(pending []Delivery, msgs <-chan jetstream.Msg) {
	if msgs != nil { // no pull open: nothing more can arrive (ranging over nil would block forever)
		for m := range msgs {
			if d, ok := c.decode(m); ok {
				c.held.Add(1)
				pending = append(pending, d)
			}
		}
	}
	for _, d := range pending {
		if err := d.Msg.Nak(); err != nil {
			c.log.Warn().Err(err).Uint64("stream_seq", d.StreamSeq).Msg("hand back on stop")
		}
	}
	c.held.Add(-int64(len(pending)))
	c.log.Info().Int("handed_back", len(pending)).Msg("stopped pulling")
}

// decode turns a message into a Delivery. It reports false for a message without
// JetStream metadata, which cannot be tracked; such a message is logged and left
// to the ack wait (it cannot come from a JetStream pull).
func (c *Consumer) decode(m jetstream.Msg) (Delivery, bool) {
	md, err := m.Metadata()
	if err != nil {
		c.log.Error().Err(err).Str("subject", m.Subject()).Msg("message without JetStream metadata")
		return Delivery{}, false
	}
	subject := c.intern(m.Subject())
	d := Delivery{
		Msg:          Msg{subject: subject, reply: m.Reply(), hdr: pack(m.Headers()), data: m.Data(), acks: c.acks},
		StreamSeq:    md.Sequence.Stream,
		NumDelivered: md.NumDelivered,
		Published:    md.Timestamp,
	}
	d.Headers, d.Err = d.Msg.Decode()
	return d, true
}

// intern returns the interned copy of subject: every request of a class
// shares one string instead of one each.
func (c *Consumer) intern(subject string) string {
	if s, ok := c.subjects[subject]; ok {
		return s
	}
	if len(c.subjects) < maxInterned {
		c.subjects[subject] = subject
	}
	return subject
}
