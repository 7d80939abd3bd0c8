// Package fifo is a first-in, first-out queue over a ring buffer, for the
// time-ordered memories of both sides (the settlement log, the handshake's
// deadlines, the memories of cancelled and finished requests).
//
// It replaces a slice with a moving head, which has to move its live part
// back to the front now and then: a copy of the whole queue, in one call, on
// whatever goroutine happens to pop. A dispatcher keeping a million dispatches
// for settlement paused its queue actor for milliseconds at each such copy. A
// ring moves elements only when it grows to a size it never had, or shrinks
// to a quarter of it.
package fifo

// minCap is the smallest buffer a queue holds; it is not shrunk below it.
const minCap = 8

// Queue is a FIFO queue. The zero value is an empty queue ready to use.
// Not safe for concurrent use.
type Queue[T any] struct {
	buf  []T // len(buf) is 0 or a power of two; the elements are buf[head:head+n] modulo len(buf)
	head int
	n    int
}

// Len returns the number of elements.
func (q *Queue[T]) Len() int { return q.n }

// Push adds v at the back. O(1) amortized.
func (q *Queue[T]) Push(v T) {
	if q.n == len(q.buf) {
		q.resize(max(minCap, 2*len(q.buf)))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

// Pop removes the front element and returns it; the queue keeps nothing of
// it (its slot is zeroed, so it holds no pointer alive). O(1) amortized.
// Pop of an empty queue panics.
func (q *Queue[T]) Pop() T {
	if q.n == 0 {
		panic("fifo: Pop of an empty queue")
	}
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	if q.n == 0 {
		q.head = 0
	}
	if len(q.buf) > minCap && q.n <= len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
	return v
}

// At returns the element i places from the front (0 is the front). The
// pointer is good until the next Push or Pop. At panics if i is not in
// [0, Len()).
func (q *Queue[T]) At(i int) *T {
	if uint(i) >= uint(q.n) {
		panic("fifo: index out of range")
	}
	return &q.buf[(q.head+i)&(len(q.buf)-1)]
}

// Front returns the front element, as At(0).
func (q *Queue[T]) Front() *T { return q.At(0) }

// Back returns the back element, as At(Len()-1).
func (q *Queue[T]) Back() *T { return q.At(q.n - 1) }

// Search returns the smallest i in [0, Len()) for which f(At(i)) is true,
// or Len() if there is none, assuming f is false and then true along the
// queue (sort.Search's contract). O(log Len()) calls of f.
func (q *Queue[T]) Search(f func(*T) bool) int {
	lo, hi := 0, q.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(q.At(m)) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// resize moves the elements, in order, to a new buffer of capacity c.
func (q *Queue[T]) resize(c int) {
	buf := make([]T, c)
	if q.n > 0 {
		k := copy(buf, q.buf[q.head:min(q.head+q.n, len(q.buf))])
		copy(buf[k:q.n], q.buf)
	}
	q.buf, q.head = buf, 0
}
