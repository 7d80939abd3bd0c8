package ingest

import "sync"

// Gate tells consumers whether they may pull: the queue actor closes it while
// no worker is live (docs/design.md, Fleet outage), so that the backlog waits
// in the stream, and opens it when a worker reports again. One Gate serves
// every consumer of a process (each leadership term has its own). The zero
// value is open. Safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	closed  bool
	changed chan struct{} // closed, and replaced, at each change
}

// Set opens (false) or closes (true) the gate. Setting the state it has
// changes nothing.
func (g *Gate) Set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == closed {
		return
	}
	g.closed = closed
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// State reports whether the gate is closed, and a channel closed at its next
// change.
func (g *Gate) State() (closed bool, changed <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.closed, g.changed
}

// Closed reports whether the gate is closed.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}
