package lanes

import (
	"fairdispatch/internal/iheap"
	"fairdispatch/request"
)

// Checker says whether a lane head may be dispatched now (docs/design.md, Lanes; docs/design.md, Gates): for
// the scheduler, whether the request's class is not gated for it.
type Checker interface {
	Dispatchable(r *request.Snapshot) bool
}

// lane is one heap of requests of one key: its shared lane, or a pinned
// target's.
type lane struct {
	target  request.Target
	q       queue
	pos     int  // position in its key's ready index, -1 when not indexed
	blocked bool // in Keyed.blocked
	owner   *key // the key whose lane it is
}

// queue is a heap of requests ordered by request.Snapshot.Before. Each request
// knows its position (Snapshot.Index, -1 when not queued), so removal is
// O(log n).
type queue = iheap.Heap[*request.Snapshot, byBefore]

type byBefore struct{}

func (byBefore) Less(a, b *request.Snapshot) bool    { return a.Before(b) }
func (byBefore) SetIndex(r *request.Snapshot, i int) { r.Index = i }

// index is a heap of lanes ordered by their heads; each lane knows its
// position (lane.pos), -1 when it is not in the index.
type index = iheap.Heap[*lane, byHead]

type byHead struct{}

func (byHead) Less(a, b *lane) bool    { return a.q[0].Before(b.q[0]) }
func (byHead) SetIndex(l *lane, i int) { l.pos = i }
