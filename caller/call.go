package caller

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// EventKind says what an Event carries.
type EventKind int

const (
	// EventDispatched: a worker accepted the request (Event.Outcome). It may
	// come again with a higher attempt after a redelivery.
	EventDispatched EventKind = iota + 1
	// EventChunk: the next chunk of the response (Event.Data, Event.Seq).
	EventChunk
	// EventEnd: the end record (Event.End); nothing follows.
	EventEnd
)

// Event is one step of a call.
type Event struct {
	Kind    EventKind
	Seq     uint64
	Data    []byte
	Outcome *wire.Outcome
	End     *wire.ResponseEnd
}

// Call is one published request and its response.
type Call struct {
	c         *Caller
	id        string
	subject   string
	sub       *nats.Subscription
	duplicate bool
	notify    chan struct{}

	mu        sync.Mutex
	exec      string // the execution answered "go" last
	seen      uint64 // chunks received in order
	queue     []Event
	lastHeard time.Time // last message of exec, once a chunk was seen
	heardExec time.Time // last claim, ping or chunk of exec
	reconns   uint64    // the connection's reconnections when last checked
	lostAt    time.Time // when Recv saw a reconnection, exec chosen and no chunk seen; zero: none
	end       *wire.ResponseEnd
	err       error // terminal: rejected, broken, cancelled
	cancelled bool
	closed    bool
	started   time.Time
}

func newCall(c *Caller, id, subject string) *Call {
	return &Call{c: c, id: id, subject: subject, notify: make(chan struct{}, 1), started: time.Now(),
		reconns: c.nc.Stats().Reconnects}
}

// ID returns the request id.
func (c *Call) ID() string { return c.id }

// Subject returns the response subject.
func (c *Call) Subject() string { return c.subject }

// Duplicate reports whether JetStream deduplicated the publication: a request
// with this id was stored before (inside the duplicate window). The call then
// follows that request's response, if it is still running; it never cancels
// it (Close only unsubscribes): the first attempt owns the request.
func (c *Call) Duplicate() bool { return c.duplicate }

// Attached reports whether the call follows an execution: one it answered
// go, or, for a duplicate, one it took over before its first chunk.
func (c *Call) Attached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exec != ""
}

// Chunks returns how many chunks have arrived in order.
func (c *Call) Chunks() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

func (c *Call) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func answer(m *nats.Msg, v string) {
	if m.Reply == "" {
		return
	}
	r := nats.NewMsg(m.Reply)
	r.Header.Set(wire.HeaderResponse, v)
	_ = m.RespondMsg(r)
}

// onMsg handles every message on the response subject (nats.go's goroutine
// of the subscription: one at a time, in order), answering as
// docs/protocol.md, What the producer answers, says.
func (c *Call) onMsg(m *nats.Msg) {
	kind := wire.HeaderValue(m.Header, wire.HeaderResponse)
	if kind == "" {
		c.onOutcome(m)
		return
	}
	exec := wire.HeaderValue(m.Header, wire.HeaderExecution)
	c.mu.Lock()
	defer c.mu.Unlock()
	over := c.cancelled || c.closed || c.end != nil || c.err != nil
	switch kind {
	case wire.MsgClaim:
		switch {
		case over:
			answer(m, wire.AnswerCancel)
		case c.seen > 0 && exec != c.exec:
			answer(m, wire.AnswerTaken)
		default:
			c.exec = exec // the newest claim wins until a chunk is seen
			c.heardExec = time.Now()
			answer(m, wire.AnswerGo)
		}
	case wire.MsgPing:
		switch {
		case over:
			answer(m, wire.AnswerCancel)
		case c.exec == "":
			// Another producer of the same request (a retry with its id)
			// answered the claim. Before the first chunk the call takes
			// that execution as its own: it attaches. After, the chunks
			// went elsewhere and it answers nothing, leaving the answer to
			// whoever has them (docs/protocol.md, What the producer answers).
			if n, err := wire.ParseResponseSeq(wire.HeaderValue(m.Header, wire.HeaderResponseSeq)); err == nil && n == 0 {
				c.exec, c.heardExec = exec, time.Now()
				answer(m, wire.AnswerOK)
			}
		case exec != c.exec:
			answer(m, wire.AnswerTaken)
		default:
			if n, err := wire.ParseResponseSeq(wire.HeaderValue(m.Header, wire.HeaderResponseSeq)); err == nil && n > c.seen {
				c.breakLocked("the worker sent " + strconv.FormatUint(n, 10) + " chunks, " + strconv.FormatUint(c.seen, 10) + " arrived")
				answer(m, wire.AnswerCancel)
				return
			}
			c.heardExec = time.Now()
			if c.seen > 0 {
				c.lastHeard = c.heardExec
			}
			answer(m, wire.AnswerOK)
		}
	case wire.MsgChunk:
		if over || exec != c.exec {
			return // a superseded execution's, or after the end
		}
		seq, err := wire.ParseResponseSeq(wire.HeaderValue(m.Header, wire.HeaderResponseSeq))
		if err != nil || seq != c.seen+1 {
			c.breakLocked("chunk " + strconv.Quote(wire.HeaderValue(m.Header, wire.HeaderResponseSeq)) + " where " + strconv.FormatUint(c.seen+1, 10) + " was due")
			return
		}
		if len(c.queue) >= c.c.cfg.MaxBuffered {
			c.breakLocked("the reader fell " + strconv.Itoa(len(c.queue)) + " chunks behind")
			return
		}
		c.seen = seq
		c.lastHeard = time.Now()
		c.heardExec = c.lastHeard
		c.queue = append(c.queue, Event{Kind: EventChunk, Seq: seq, Data: m.Data})
		c.wake()
	case wire.MsgEnd:
		answer(m, wire.AnswerOK) // an acknowledgement, whatever the state
		if over || exec != c.exec {
			return
		}
		seq, err := wire.ParseResponseSeq(wire.HeaderValue(m.Header, wire.HeaderResponseSeq))
		if err != nil || seq != c.seen+1 {
			c.breakLocked("end " + strconv.Quote(wire.HeaderValue(m.Header, wire.HeaderResponseSeq)) + " where " + strconv.FormatUint(c.seen+1, 10) + " was due (a chunk was lost)")
			return
		}
		end, err := wire.ParseResponseEnd(m.Data)
		if err != nil {
			end = wire.ResponseEnd{Status: wire.EndFailed, Chunks: c.seen, Error: "undecodable end marker: " + err.Error()}
		}
		c.end = &end
		c.queue = append(c.queue, Event{Kind: EventEnd, Seq: seq, End: c.end})
		c.wake()
	}
}

// onOutcome handles a message without Dispatch-Response: the dispatcher's
// outcome (docs/protocol.md, Outcomes).
func (c *Call) onOutcome(m *nats.Msg) {
	var o wire.Outcome
	if err := json.Unmarshal(m.Data, &o); err != nil || o.RequestID != c.id {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end != nil || c.err != nil {
		return
	}
	switch o.Status {
	case wire.StatusDispatched:
		c.queue = append(c.queue, Event{Kind: EventDispatched, Outcome: &o})
	case wire.StatusRejected:
		if c.seen > 0 {
			return // a late outcome of an earlier delivery; the response runs
		}
		c.err = &RejectedError{ID: o.RequestID, Class: o.PolicyClass, Code: o.Error, Message: o.Message, Details: o.Details}
	case wire.StatusCancelled:
		c.err = ErrCancelled
	default:
		return
	}
	c.wake()
}

// breakLocked ends the call as broken and cancels the request; c.mu is held.
func (c *Call) breakLocked(reason string) {
	c.err = &BrokenError{ID: c.id, Chunks: int(c.seen), Reason: reason}
	c.wake()
	if !c.duplicate {
		go c.publishCancel()
	}
}

func (c *Call) publishCancel() { _ = c.c.Cancel(c.id) }

// Recv returns the call's next event. After EventEnd it returns the same end
// again. Its errors: *RejectedError, *BrokenError, ErrCancelled, or ctx's
// error (the call stays open: Close it).
func (c *Call) Recv(ctx context.Context) (Event, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			ev := c.queue[0]
			c.queue[0] = Event{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return ev, nil
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return Event{}, err
		}
		if c.end != nil {
			end := c.end
			c.mu.Unlock()
			return Event{Kind: EventEnd, End: end}, nil
		}
		var wait <-chan time.Time
		left := time.Duration(-1) // no bound
		switch {
		case c.seen > 0:
			if left = time.Until(c.lastHeard.Add(c.c.cfg.BrokenAfter)); left <= 0 {
				c.breakLocked("nothing heard from the worker for " + c.c.cfg.BrokenAfter.String())
				c.mu.Unlock()
				continue
			}
		case c.exec != "":
			if left = c.reconnectWatchLocked(); left <= 0 {
				c.breakLocked("the connection to NATS was lost after the worker's claim, and the worker has not been heard from since (a claim or ping that finds nobody listening stops it)")
				c.mu.Unlock()
				continue
			}
		}
		if left > 0 {
			if timer == nil {
				timer = time.NewTimer(left)
			} else {
				timer.Reset(left)
			}
			wait = timer.C
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-wait:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// reconnectWatchLocked returns how long Recv may wait before it checks
// again, for a call following an execution that has sent no chunk: silence
// then only means the prefill, unless the connection was lost meanwhile.
// A claim or ping that found the call unsubscribed stopped the execution
// for good (docs/protocol.md, Nobody listening), and nothing more will come.
// So once a reconnection is seen, the execution has BrokenAfter to be heard
// from again; it returns 0 when that has passed. c.mu is held.
func (c *Call) reconnectWatchLocked() time.Duration {
	bound := c.c.cfg.BrokenAfter
	now := time.Now()
	if c.lostAt.IsZero() {
		n := c.c.nc.Stats().Reconnects
		if n == c.reconns {
			return bound // check again then
		}
		c.reconns, c.lostAt = n, now
	}
	if c.heardExec.After(c.lostAt) { // heard since: it lives
		c.lostAt = time.Time{}
		return bound
	}
	return c.lostAt.Add(bound).Sub(now)
}

// Cancel cancels the request (docs/protocol.md, Cancellation) unless it has
// ended, and stops following it. Recv then returns ErrCancelled.
func (c *Call) Cancel() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	// Only a request still open is cancelled: an ended, rejected or broken
	// one (broken: cancelled then) needs nothing more.
	// A deduplicated call attached to its first attempt's request, which
	// that attempt owns: it only stops listening.
	send := c.end == nil && c.err == nil && !c.cancelled && !c.duplicate
	c.cancelled = true
	if c.err == nil && c.end == nil {
		c.err = ErrCancelled
	}
	c.closed = true
	c.queue = nil
	c.mu.Unlock()
	c.wake()
	if send {
		c.publishCancel()
	}
	_ = c.sub.Unsubscribe()
}

// Close ends the call: it cancels the request when it has not ended, and
// unsubscribes. It is idempotent.
func (c *Call) Close() { c.Cancel() }

// Buffered returns how many events wait for Recv: a relay may hold back a
// flush while more are at hand.
func (c *Call) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Since returns the time since the call was started.
func (c *Call) Since() time.Duration { return time.Since(c.started) }
