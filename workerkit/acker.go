package workerkit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Timing of confirmed acknowledgements (docs/protocol.md, After accepting).
const (
	// ackAttemptTimeout is how long one attempt waits for JetStream's answer.
	ackAttemptTimeout = time.Second
	// ackBackoffMin and ackBackoffMax bound the wait before another attempt
	// after a "no responders" answer (JetStream still recovering its
	// consumers after a server restart or a leader change).
	ackBackoffMin = 20 * time.Millisecond
	ackBackoffMax = 500 * time.Millisecond
)

// acker sends the acknowledgements of finished requests (+ACK, +TERM, -NAK)
// as NATS requests and sends them again until JetStream answers, without a
// goroutine or a timer per acknowledgement: the first attempt is published
// on the caller's goroutine (a publish, as a plain acknowledgement is), every
// answer arrives on one wildcard subscription of the connection's inbox
// (reply subject "<inbox>.<attempt id>"), and one goroutine times attempts
// out and sends the retries.
//
// The rules (docs/protocol.md, After accepting):
//   - An attempt unanswered within ackAttemptTimeout, or answered "no
//     responders", is made again: at once after a timeout, after a backoff
//     (20 ms doubling to 500 ms) after no responders.
//   - +ACK and +TERM are retried after a timeout, since JetStream answers an
//     acknowledgement of a message it no longer holds like any other. -NAK is
//     not: an attempt whose answer was lost may have taken effect, and a
//     second -NAK would hand back the redelivery another worker may by then
//     run. It is retried only after "no responders", which proves it was not
//     taken.
//   - While the connection is down no attempt is made; every one waiting is
//     made at once when it is back (nats.go has resubscribed by then).
//   - An acknowledgement is given up once its deadline (its request's ack
//     wait after the first attempt) has passed and an attempt made while
//     connected went unanswered, when its connection closes, and when Stop's
//     grace runs out. Past the ack wait JetStream may have redelivered the
//     message already; a redelivery to this worker within the memory window
//     is answered from the finished-request memory (finished.go).
//
// Costs: a first attempt is one map insert and one slice append under the
// lock, and one publish; an answer is one map delete. The goroutine wakes
// about once per attempt timeout while acknowledgements are outstanding, and
// not at all otherwise. Safe for concurrent use.
type acker struct {
	nc     *nats.Conn
	log    zerolog.Logger
	inbox  string // "<inbox>."
	sub    *nats.Subscription
	status chan nats.Status

	kick chan struct{} // cap 1: the loop must recompute its wake-up
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the loop ends

	mu       sync.Mutex
	next     uint64              // the last attempt id given out
	inflight map[uint64]*ackCall // calls by the id of their outstanding attempt
	sent     []sentAttempt       // attempts in sending order, for their timeouts (answered ones are skipped)
	retry    []*ackCall          // calls waiting for their next attempt
	wake     time.Time           // the loop's next planned wake-up (zero: none)
	closed   bool
	idle     chan struct{} // set by stop: closed once nothing is outstanding
	answered bool          // some attempt was answered since start
	hinted   bool          // the permission hint was logged
	stats    ackCounters
	// observe, when set (tests, benchmarks), is told each confirmation's time
	// since its first attempt; it runs under a.mu and must not block.
	observe func(time.Duration)
}

// ackCounters are the acker's counters, reported in [Stats].
type ackCounters struct {
	confirmed, retries, unconfirmed, plain uint64
}

// ackCall is one acknowledgement until JetStream answers it or it is given up.
type ackCall struct {
	subj, reqID string
	body        []byte
	nak         bool      // -NAK: not retried after an unanswered attempt
	first       time.Time // the first attempt
	deadline    time.Time // first + ack wait
	attempt     int       // attempts made
	id          uint64    // the outstanding attempt, 0 when none
	due         time.Time // when waiting in retry: the next attempt
	backoff     time.Duration
	before      func(attempt int) // nil: none
}

type sentAttempt struct {
	c  *ackCall
	id uint64
	at time.Time
}

// newAcker subscribes to a fresh inbox of nc and starts the acker's goroutine.
func newAcker(nc *nats.Conn, log zerolog.Logger) (*acker, error) {
	a := &acker{
		nc: nc, log: log, inbox: nc.NewInbox() + ".",
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		inflight: make(map[uint64]*ackCall),
	}
	sub, err := nc.Subscribe(a.inbox+"*", a.onReply)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	a.sub = sub
	a.status = nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	go a.loop()
	return a, nil
}

// send makes the first attempt of an acknowledgement of request reqID:
// body to subj, given up after ackWait as the type's doc says; before, when
// not nil, is called ahead of every attempt (the first on the caller's
// goroutine, the others on the acker's). It returns an error only when the
// connection is closed or the subject invalid: nothing more will be tried.
func (a *acker) send(subj, reqID string, body []byte, ackWait time.Duration, before func(int)) error {
	now := time.Now()
	c := &ackCall{subj: subj, reqID: reqID, body: body, nak: string(body) == string(ackNak),
		first: now, deadline: now.Add(ackWait), backoff: ackBackoffMin, before: before}
	a.mu.Lock()
	if a.closed {
		a.stats.plain++
		a.mu.Unlock()
		if before != nil {
			before(1)
		}
		return a.nc.Publish(subj, body) // after Stop: the best that can be done
	}
	if c.nak && !a.nc.IsConnected() {
		// Not into the reconnect buffer: nats.go would send that copy on
		// reconnection, and an unanswered one could not be told from one
		// that took effect. It waits for the connection, as the rules say
		// (docs/protocol.md: the connection is down, wait), and goes once.
		c.due = now
		a.retry = append(a.retry, c)
		a.mu.Unlock()
		return nil
	}
	id, attempt := a.attemptLocked(c, now)
	a.mu.Unlock()
	return a.publish(c, id, attempt)
}

// attemptLocked registers c's next attempt at now; a.mu is held.
func (a *acker) attemptLocked(c *ackCall, now time.Time) (id uint64, attempt int) {
	a.next++
	c.id = a.next
	c.attempt++
	if c.attempt > 1 {
		a.stats.retries++
	}
	a.inflight[c.id] = c
	a.sent = append(a.sent, sentAttempt{c, c.id, now})
	a.wakeAtLocked(now.Add(ackAttemptTimeout))
	return c.id, c.attempt
}

// wakeAtLocked makes the loop wake at t at the latest; a.mu is held.
func (a *acker) wakeAtLocked(t time.Time) {
	if a.wake.IsZero() || t.Before(a.wake) {
		a.wake = t
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// publish sends attempt id of c; on an error no retry can fix it gives c up.
func (a *acker) publish(c *ackCall, id uint64, attempt int) error {
	if c.before != nil {
		c.before(attempt)
	}
	err := a.nc.PublishRequest(c.subj, a.inbox+strconv.FormatUint(id, 36), c.body)
	if err == nil || !(errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrBadSubject)) {
		return nil // sent, or to be sent again after its timeout (a full reconnect buffer)
	}
	a.mu.Lock()
	if a.inflight[id] == c {
		delete(a.inflight, id)
		c.id = 0
		a.giveUpLocked(c, "the connection is closed", true)
	}
	a.mu.Unlock()
	return err
}

// onReply takes JetStream's answer to an attempt.
func (a *acker) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 36, 64)
	if err != nil {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.inflight[id]
	if c == nil {
		return // late: its attempt timed out, or the call was given up
	}
	delete(a.inflight, id)
	c.id = 0
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		a.failedLocked(c, now, false)
		return
	}
	// JetStream answers an acknowledgement with an empty message.
	a.answered = true
	a.stats.confirmed++
	if a.observe != nil {
		a.observe(now.Sub(c.first))
	}
	a.idleCheckLocked()
}

// failedLocked handles an attempt of c that timed out (timedOut) or found
// no responders; a.mu is held.
func (a *acker) failedLocked(c *ackCall, now time.Time, timedOut bool) {
	switch {
	case c.nak && timedOut:
		a.giveUpLocked(c, "a -NAK whose answer was lost may have taken effect: not sent again", true)
		return
	case a.nc.IsConnected() && now.After(c.deadline):
		a.giveUpLocked(c, "unanswered for the request's ack wait", true)
		if !a.answered && !a.hinted {
			a.hinted = true
			a.log.Error().Msg("no acknowledgement has been answered since the worker started: may the worker's NATS user " +
				"subscribe to its connection's inbox (docs/protocol.md, Permissions a worker needs)? Without, set Config.PlainAcks")
		}
		return
	}
	c.due = now
	if !timedOut {
		c.due = now.Add(c.backoff)
		c.backoff = min(2*c.backoff, ackBackoffMax)
	}
	a.retry = append(a.retry, c)
	a.wakeAtLocked(c.due)
}

// giveUpLocked stops trying c, logging it when log is set; a.mu is held.
func (a *acker) giveUpLocked(c *ackCall, why string, log bool) {
	a.stats.unconfirmed++
	if log {
		a.log.Warn().Str("request_id", c.reqID).Int("attempts", c.attempt).Str("why", why).
			Msg("acknowledgement not confirmed by JetStream; the request may be dispatched again")
	}
	a.idleCheckLocked()
}

// idleCheckLocked closes a.idle once nothing is outstanding; a.mu is held.
func (a *acker) idleCheckLocked() {
	if a.idle != nil && len(a.inflight) == 0 && len(a.retry) == 0 {
		select {
		case <-a.idle:
		default:
			close(a.idle)
		}
	}
}

// loop times attempts out and makes the retries that are due.
func (a *acker) loop() {
	defer close(a.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	type due struct {
		c       *ackCall
		id      uint64
		attempt int
	}
	var send []due
	for {
		send = send[:0]
		a.mu.Lock()
		now := time.Now()
		for len(a.sent) > 0 {
			s := a.sent[0]
			if a.inflight[s.id] == s.c && now.Sub(s.at) < ackAttemptTimeout {
				break
			}
			a.sent[0] = sentAttempt{}
			a.sent = a.sent[1:]
			if a.inflight[s.id] == s.c { // timed out
				delete(a.inflight, s.id)
				s.c.id = 0
				a.failedLocked(s.c, now, true)
			}
		}
		var next time.Time
		if len(a.sent) > 0 {
			next = a.sent[0].at.Add(ackAttemptTimeout)
		}
		if a.nc.IsConnected() {
			keep := a.retry[:0]
			for _, c := range a.retry {
				if c.due.After(now) {
					keep = append(keep, c)
					if next.IsZero() || c.due.Before(next) {
						next = c.due
					}
					continue
				}
				id, attempt := a.attemptLocked(c, now)
				send = append(send, due{c, id, attempt})
			}
			clear(a.retry[len(keep):])
			a.retry = keep
			if len(send) > 0 && (next.IsZero() || now.Add(ackAttemptTimeout).Before(next)) {
				next = now.Add(ackAttemptTimeout)
			}
		} // else: the status channel wakes the loop when the connection is back
		a.wake = next
		a.mu.Unlock()
		for _, d := range send {
			_ = a.publish(d.c, d.id, d.attempt)
		}
		select {
		case <-a.quit:
			return
		case <-a.kick:
		case <-armed(t, next):
		case s, ok := <-a.status:
			if ok && s == nats.CLOSED {
				a.abandon("the connection closed")
			}
			if !ok {
				a.status = nil
			}
		}
	}
}

// abandon gives up every outstanding acknowledgement.
func (a *acker) abandon(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.inflight) + len(a.retry)
	for id, c := range a.inflight {
		delete(a.inflight, id)
		c.id = 0
		a.giveUpLocked(c, why, false)
	}
	for _, c := range a.retry {
		a.giveUpLocked(c, why, false)
	}
	if n > 0 {
		a.log.Warn().Int("acknowledgements", n).Str("why", why).
			Msg("acknowledgements left unconfirmed: a +ACK or +TERM among them, if lost, lets JetStream dispatch its request again")
	}
	clear(a.retry)
	a.retry = a.retry[:0]
	clear(a.sent)
	a.sent = a.sent[:0]
}

// pending returns the number of acknowledgements outstanding.
func (a *acker) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.inflight) + len(a.retry)
}

// counters returns the counters so far.
func (a *acker) counters() ackCounters {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// stop waits until every acknowledgement is confirmed or given up, or ctx
// ends, then gives up the rest and stops: later acknowledgements are
// published plain.
func (a *acker) stop(ctx context.Context) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.idle = make(chan struct{})
	a.idleCheckLocked()
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	close(a.quit)
	<-a.done
	a.abandon("the worker stopped before JetStream answered")
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	_ = a.sub.Unsubscribe() // an error means the connection is going away: nothing to do
	if a.status != nil {
		a.nc.RemoveStatusListener(a.status)
	}
}
