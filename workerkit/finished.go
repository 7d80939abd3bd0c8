package workerkit

import (
	"hash/maphash"
	"time"

	"fairdispatch/internal/fifo"
	"fairdispatch/wire"
)

// The finished-request memory (docs/protocol.md, A dispatch of a request
// already finished): how long and how many request ids the helper remembers.
const (
	// FinishedWindow is how long the helper remembers a request it finished
	// (acknowledged or dropped): 5 minutes, well beyond two ack waits of 30 s
	// plus the dispatch timeout, the protocol's least. A dispatcher whose
	// --ack-wait is above 2 minutes outgrows it.
	FinishedWindow = 5 * time.Minute
	// FinishedIDs bounds the request ids remembered: 100,000, the oldest
	// forgotten first; at about 82 bytes each (TestFinishedMemoBytesPerID),
	// about 8 MB. It covers FinishedWindow up to about 330 requests finished
	// per second; beyond, the window is shorter.
	FinishedIDs = 100_000
)

// memoKey is a request id's 128-bit keyed hash: the memory is bounded
// whatever the ids' length, and two ids of one worker share a key with a
// chance of about 10^-34 per lookup (a collision would acknowledge a request
// that never ran).
type memoKey struct{ a, b uint64 }

// memoEntry is what the memory keeps of a finished request.
type memoEntry struct {
	at       int64 // when it finished, Unix ns
	term     bool  // dropped (+TERM), not done (+ACK)
	recorded bool  // a completion record was published for it
	status   uint8 // its record's status: an index in memoStatuses
}

// memoStatuses are the completion record statuses the memory tells apart;
// any other reads as the first.
var memoStatuses = [...]string{wire.StatusOK, wire.StatusFailed, wire.StatusCancelled}

func memoStatus(s string) uint8 {
	for i, v := range memoStatuses {
		if s == v {
			return uint8(i)
		}
	}
	return 0
}

type memoItem struct {
	key memoKey
	at  int64
}

// finishedMemo remembers the request ids a worker finished, for window, at
// most max of them, oldest first out. Costs: add and get O(1) amortised.
// Not safe for concurrent use (the worker's mu guards it).
type finishedMemo struct {
	seeds  [2]maphash.Seed
	window time.Duration
	max    int
	byKey  map[memoKey]memoEntry
	order  fifo.Queue[memoItem] // finishing order
}

func newFinishedMemo(window time.Duration, max int) *finishedMemo {
	return &finishedMemo{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		window: window, max: max, byKey: make(map[memoKey]memoEntry)}
}

func (f *finishedMemo) key(id string) memoKey {
	return memoKey{maphash.String(f.seeds[0], id), maphash.String(f.seeds[1], id)}
}

// add remembers id as finished at now.
func (f *finishedMemo) add(id string, now time.Time, e memoEntry) {
	f.expire(now)
	k := f.key(id)
	e.at = now.UnixNano()
	f.byKey[k] = e
	f.order.Push(memoItem{k, e.at})
	for len(f.byKey) > f.max {
		f.pop()
	}
}

// get returns what is remembered of id at now.
func (f *finishedMemo) get(id string, now time.Time) (memoEntry, bool) {
	f.expire(now)
	e, ok := f.byKey[f.key(id)]
	return e, ok
}

// recorded notes that id's completion record was published, with status.
func (f *finishedMemo) recorded(id, status string) {
	k := f.key(id)
	if e, ok := f.byKey[k]; ok {
		e.recorded, e.status = true, memoStatus(status)
		f.byKey[k] = e
	}
}

// expire forgets what finished more than window before now.
func (f *finishedMemo) expire(now time.Time) {
	limit := now.Add(-f.window).UnixNano()
	for f.order.Len() > 0 && f.order.Front().at <= limit {
		f.pop()
	}
}

// pop forgets the oldest item (unless its key was added again since).
func (f *finishedMemo) pop() {
	it := f.order.Pop()
	if e, ok := f.byKey[it.key]; ok && e.at == it.at {
		delete(f.byKey, it.key)
	}
}

// len returns the number of ids remembered.
func (f *finishedMemo) len() int { return len(f.byKey) }
