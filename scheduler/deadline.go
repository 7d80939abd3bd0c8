package scheduler

import (
	"fairdispatch/internal/iheap"
	"fairdispatch/request"
)

// deadlines is a min-heap of queued requests by Deadline; each request knows
// its position (Snapshot.DeadlineIndex, -1 when not in it).
type deadlines = iheap.Heap[*request.Snapshot, byDeadline]

type byDeadline struct{}

func (byDeadline) Less(a, b *request.Snapshot) bool    { return a.Deadline < b.Deadline }
func (byDeadline) SetIndex(r *request.Snapshot, i int) { r.DeadlineIndex = i }

// removeDeadline removes r from d if it is there.
func removeDeadline(d *deadlines, r *request.Snapshot) {
	if r.DeadlineIndex >= 0 {
		d.Remove(r.DeadlineIndex)
	}
}
