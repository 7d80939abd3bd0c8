// Package iheap is a binary min-heap whose items know their position, so that
// an item can be removed or re-ordered in O(log n) without a search: the
// container/heap algorithm, generic, with no interface boxing and no
// allocation beyond the slice's growth (a heap keeps its storage when it
// shrinks). It is pure and single-threaded, for the deterministic core.
package iheap

// Ops orders a Heap's items and records their positions. Implement it on a
// zero-size type: a Heap calls the methods of O's zero value.
type Ops[T any] interface {
	// Less reports whether a must come out before b.
	Less(a, b T) bool
	// SetIndex records that x is now at position i of the heap, or -1 when x
	// left the heap.
	SetIndex(x T, i int)
}

// Heap is a binary min-heap of T under O. Its elements are readable as a
// slice: h[0] is the minimum, and ranging over h visits every item in no
// particular order. Change it only through its methods.
type Heap[T any, O Ops[T]] []T

// Push adds x.
func (h *Heap[T, O]) Push(x T) {
	var o O
	i := len(*h)
	o.SetIndex(x, i)
	*h = append(*h, x)
	h.up(i)
}

// Remove removes and returns the item at position i (its SetIndex position),
// which then gets index -1.
func (h *Heap[T, O]) Remove(i int) T {
	var o O
	s := *h
	n := len(s) - 1
	x := s[i]
	if i != n {
		s[i] = s[n]
		o.SetIndex(s[i], i)
	}
	var zero T
	s[n] = zero
	*h = s[:n]
	if i != n {
		h.Fix(i)
	}
	o.SetIndex(x, -1)
	return x
}

// Pop removes and returns the minimum; the heap must not be empty.
func (h *Heap[T, O]) Pop() T { return h.Remove(0) }

// Fix restores the order after the item at position i changed.
func (h Heap[T, O]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// up and down move an item along its path, shifting the others by one
// position each and recording each move once, where a swap would record two:
// Less and SetIndex are indirect calls in a generic type, so their count
// matters on the dispatch path. The comparisons are those of container/heap,
// so the resulting order is the same.

func (h Heap[T, O]) up(j int) {
	var o O
	x := h[j]
	for j > 0 {
		i := (j - 1) / 2
		if !o.Less(x, h[i]) {
			break
		}
		h[j] = h[i]
		o.SetIndex(h[j], j)
		j = i
	}
	h[j] = x
	o.SetIndex(x, j)
}

func (h Heap[T, O]) down(i0 int) bool {
	var o O
	x := h[i0]
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && o.Less(h[k], h[j]) {
			j = k
		}
		if !o.Less(h[j], x) {
			break
		}
		h[i] = h[j]
		o.SetIndex(h[i], i)
		i = j
	}
	if i > i0 {
		h[i] = x
		o.SetIndex(x, i)
		return true
	}
	return false
}
