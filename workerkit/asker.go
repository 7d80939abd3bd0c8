package workerkit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"fairdispatch/wire"
)

// Errors an asker hands its callbacks.
var (
	// errNoResponders: the server answered that nobody subscribes to the
	// subject (NATS's "Status: 503").
	errNoResponders = errors.New("worker: no responders")
	// errNoAnswer: no answer within the call's timeout (or the call was
	// forgotten first).
	errNoAnswer = errors.New("worker: no answer in time")
)

// asker sends NATS requests without a goroutine per request: every answer
// arrives on one wildcard subscription of the connection's inbox, reply
// subject "<inbox>.<call id>", and each call's timeout is a runtime timer.
// It carries the claims, pings and end markers of the response path
// (docs/protocol.md, Messages of a response). Safe for concurrent use.
type asker struct {
	nc    *nats.Conn
	inbox string // "<inbox>."
	sub   *nats.Subscription

	mu    sync.Mutex
	next  uint64
	calls map[uint64]*call
}

// call is one request waiting for its answer.
type call struct {
	done  func(id uint64, answer string, err error)
	timer *time.Timer
}

// newAsker returns an asker on nc; it subscribes on its first request, so
// that a worker that never streams a response needs no inbox (and no
// permission for one).
func newAsker(nc *nats.Conn) *asker {
	return &asker{nc: nc, inbox: nc.NewInbox() + ".", calls: make(map[uint64]*call)}
}

// subscribe makes the inbox subscription once; a.mu is held.
func (a *asker) subscribe() error {
	if a.sub != nil {
		return nil
	}
	sub, err := a.nc.Subscribe(a.inbox+"*", a.onReply)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s*: %w", a.inbox, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("worker: pending limits %s*: %w", a.inbox, err)
	}
	a.sub = sub
	return nil
}

// ask publishes m as a request and calls done exactly once, with the call's
// id: with the answer's Dispatch-Response value ("" when absent), with
// errNoResponders, or with errNoAnswer after timeout. done runs on the subscription's goroutine or a
// timer's, never under the caller's locks, and must not block. It returns
// the call's id (for forget) or the publish error, in which case done is not
// called.
func (a *asker) ask(m *nats.Msg, timeout time.Duration, done func(id uint64, answer string, err error)) (uint64, error) {
	a.mu.Lock()
	if err := a.subscribe(); err != nil {
		a.mu.Unlock()
		return 0, err
	}
	a.next++
	id := a.next
	c := &call{done: done}
	a.calls[id] = c
	c.timer = time.AfterFunc(timeout, func() { a.expire(id) })
	a.mu.Unlock()
	m.Reply = a.inbox + strconv.FormatUint(id, 36)
	if err := a.nc.PublishMsg(m); err != nil {
		a.mu.Lock()
		delete(a.calls, id)
		a.mu.Unlock()
		c.timer.Stop()
		return 0, err
	}
	return id, nil
}

// forget drops call id without calling its done; it reports whether the call
// was still waiting.
func (a *asker) forget(id uint64) bool {
	a.mu.Lock()
	c := a.calls[id]
	delete(a.calls, id)
	a.mu.Unlock()
	if c != nil {
		c.timer.Stop()
	}
	return c != nil
}

func (a *asker) take(id uint64) *call {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.calls[id]
	delete(a.calls, id)
	return c
}

func (a *asker) expire(id uint64) {
	if c := a.take(id); c != nil {
		c.done(id, "", errNoAnswer)
	}
}

func (a *asker) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 36, 64)
	if err != nil {
		return
	}
	c := a.take(id)
	if c == nil {
		return // late: it timed out or was forgotten
	}
	c.timer.Stop()
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		c.done(id, "", errNoResponders)
		return
	}
	c.done(id, strings.TrimSpace(HeaderValue(m.Header, wire.HeaderResponse)), nil)
}

// close unsubscribes; calls still waiting end with errNoAnswer by their timers.
func (a *asker) close() {
	a.mu.Lock()
	sub := a.sub
	a.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe() // an error means the connection is going away: nothing to do
	}
}
