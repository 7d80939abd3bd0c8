package drr

import "fmt"

// req is a queued request in a fake class: an id to follow it by and its DRR cost.
type req struct {
	id   int
	cost uint64
}

// fakeQueue is a FIFO class for tests. When blocked it has queued work but no
// dispatchable candidate. It counts the calls the arbiter makes, and panics on a
// call the Queue contract forbids (Candidate on an empty class, Pop without a
// dispatchable Candidate before it, a second Candidate or Pop in one Next call).
type fakeQueue struct {
	items   []req
	blocked bool

	// Per Next call; reset by resetCalls.
	candidates int  // Candidate calls
	pops       int  // Pop calls
	offered    bool // the last Candidate call returned true and no Pop followed
	popped     req  // the request removed by the last Pop
}

func (f *fakeQueue) Empty() bool { return len(f.items) == 0 }

func (f *fakeQueue) Candidate() (uint64, bool) {
	if len(f.items) == 0 {
		panic("fake: Candidate on an empty class")
	}
	f.candidates++
	if f.candidates > 1 {
		panic("fake: Candidate called twice in one Next")
	}
	if f.blocked {
		f.offered = false
		return 0, false
	}
	f.offered = true
	return f.items[0].cost, true
}

func (f *fakeQueue) Pop() {
	if !f.offered {
		panic("fake: Pop without a dispatchable Candidate")
	}
	f.pops++
	if f.pops > 1 {
		panic("fake: Pop called twice in one Next")
	}
	f.offered = false
	f.popped = f.items[0]
	f.items = f.items[1:]
}

// push appends requests of the given costs, numbering them from next; it returns
// the next free id.
func (f *fakeQueue) push(next int, costs ...uint64) int {
	for _, c := range costs {
		f.items = append(f.items, req{id: next, cost: c})
		next++
	}
	return next
}

func (f *fakeQueue) resetCalls() {
	f.candidates, f.pops, f.offered = 0, 0, false
}

// world is a set of fake classes as the arbiter sees them.
type world struct {
	fakes []*fakeQueue
	qs    []Queue
}

func newWorld(n int) *world {
	w := &world{fakes: make([]*fakeQueue, n), qs: make([]Queue, n)}
	for k := range n {
		w.fakes[k] = &fakeQueue{}
		w.qs[k] = w.fakes[k]
	}
	return w
}

// next runs a.Next over the world and checks the Pop contract: Pop on the class
// returned and on no other. It returns the class and the request taken (id -1 when
// nothing was taken).
func (w *world) next(a *Arbiter) (int, req, error) {
	for _, f := range w.fakes {
		f.resetCalls()
	}
	k, ok := a.Next(w.qs)
	if ok != (k >= 0) {
		return k, req{id: -1}, fmt.Errorf("Next returned (%d, %v)", k, ok)
	}
	for j, f := range w.fakes {
		want := 0
		if j == k {
			want = 1
		}
		if f.pops != want {
			return k, req{id: -1}, fmt.Errorf("class %d: got %d Pop calls, want %d", j, f.pops, want)
		}
	}
	if !ok {
		return -1, req{id: -1}, nil
	}
	return k, w.fakes[k].popped, nil
}

// deficits returns every class's deficit.
func deficits(a *Arbiter) []int64 {
	d := make([]int64, len(a.quanta))
	for k := range d {
		d[k] = a.Deficit(k)
	}
	return d
}
