package dispatcher

import (
	"sync"

	"fairdispatch/workers"
)

// What NATS callbacks hand the actor (docs/decisions.md, Callbacks never
// block). A callback runs on a NATS goroutine (the reply subscription, the
// load subscription) or on the dead letterer's: if it blocked on a busy or
// stopped actor, the subscription would fall behind into a slow consumer, and
// shutdown, which closes the handshaker and the dead letterer after the actor
// has stopped, could hang. So no callback waits for the actor:
//
//   - handshake results and dead-letter completions go to a mailbox, a FIFO
//     without a fixed capacity. Neither may be dropped (a lost result loses
//     track of a request), and neither needs a bound of its own: there is
//     exactly one result per dispatch in flight and one completion per dead
//     letter pending, both bounded by the held requests (--max-held).
//   - load reports are coalesced per worker, the latest one wins (a report is
//     the worker's whole state, so a newer one supersedes an older one). A
//     superseded report, and a report from one more distinct worker than
//     maxPendingReports, is dropped and counted.

// mailbox is a FIFO that never blocks its producers. put may be called from
// any goroutine; take only from the actor's.
type mailbox[T any] struct {
	mu    sync.Mutex
	items []T
	spare []T
	wake  chan struct{} // cap 1: something was put since the last take
}

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{wake: make(chan struct{}, 1)} }

func (m *mailbox[T]) put(v T) {
	m.mu.Lock()
	m.items = append(m.items, v)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// take returns everything put so far, oldest first. The slice is valid until
// the next take.
func (m *mailbox[T]) take() []T {
	m.mu.Lock()
	out := m.items
	clear(m.spare)
	m.items, m.spare = m.spare[:0], out
	m.mu.Unlock()
	return out
}

// len returns how many items wait.
func (m *mailbox[T]) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

// maxPendingReports is the most workers whose reports wait for the actor at
// once; above the default --max-workers (10,000), so that a slow actor sheds
// only under a flood of made-up worker ids.
const maxPendingReports = 16384

// reportBox holds the latest unapplied load report of each worker.
type reportBox struct {
	mu     sync.Mutex
	latest map[string]workers.Report
	order  []string // worker ids in first-arrival order
	spare  []workers.Report
	wake   chan struct{} // cap 1
}

func newReportBox() *reportBox {
	return &reportBox{latest: make(map[string]workers.Report), wake: make(chan struct{}, 1)}
}

// superseded is what put returns for a report replaced by a newer one.
const superseded = "superseded"

// put keeps rep as its worker's latest report. It returns what was shed: the
// report it superseded ("superseded") or rep itself when too many workers
// wait already ("overflow"), or "".
func (b *reportBox) put(rep workers.Report) (shed string) {
	b.mu.Lock()
	if _, ok := b.latest[rep.WorkerID]; ok {
		shed = superseded
	} else if len(b.order) >= maxPendingReports {
		b.mu.Unlock()
		return "overflow"
	} else {
		b.order = append(b.order, rep.WorkerID)
	}
	b.latest[rep.WorkerID] = rep
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return shed
}

// take returns every waiting report, one per worker, in the order the workers
// first reported. The slice is valid until the next take.
func (b *reportBox) take() []workers.Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.spare)
	out := b.spare[:0]
	for _, id := range b.order {
		out = append(out, b.latest[id])
	}
	clear(b.latest)
	clear(b.order)
	b.order = b.order[:0]
	b.spare = out
	return out
}
