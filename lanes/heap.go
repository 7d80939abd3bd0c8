package lanes

import (
	"fairdispatch/internal/iheap"
	"fairdispatch/request"
)

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
