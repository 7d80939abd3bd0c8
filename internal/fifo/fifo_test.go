package fifo

import (
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// TestAgainstSlice: any sequence of pushes and pops keeps the queue equal to
// a plain slice model, element by element through At, Front, Back and Search,
// and the buffer within its bounds: a power of two, at least minCap, at most
// four times the elements (but for minCap).
func TestAgainstSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var q Queue[int]
		var model []int
		next := 0
		for range rapid.IntRange(0, 600).Draw(t, "ops") {
			if len(model) == 0 || rapid.Float64Range(0, 1).Draw(t, "p") < 0.55 {
				for range rapid.IntRange(1, 40).Draw(t, "pushes") {
					q.Push(next)
					model = append(model, next)
					next++
				}
			} else {
				for range rapid.IntRange(1, len(model)).Draw(t, "pops") {
					if got := q.Pop(); got != model[0] {
						t.Fatalf("Pop = %d, want %d", got, model[0])
					}
					model = model[1:]
				}
			}
			if q.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", q.Len(), len(model))
			}
			for i, want := range model {
				if got := *q.At(i); got != want {
					t.Fatalf("At(%d) = %d, want %d", i, got, want)
				}
			}
			if len(model) > 0 && (*q.Front() != model[0] || *q.Back() != model[len(model)-1]) {
				t.Fatalf("Front, Back = %d, %d, want %d, %d", *q.Front(), *q.Back(), model[0], model[len(model)-1])
			}
			x := rapid.IntRange(next-700, next+1).Draw(t, "x")
			want, _ := slices.BinarySearch(model, x)
			if got := q.Search(func(v *int) bool { return *v >= x }); got != want {
				t.Fatalf("Search(>= %d) = %d, want %d", x, got, want)
			}
			c := len(q.buf)
			if c&(c-1) != 0 || (c != 0 && c < minCap) || (c > minCap && c > 4*q.Len()+4) {
				t.Fatalf("capacity %d for %d elements", c, q.Len())
			}
		}
	})
}

// TestPopKeepsNothing: a popped slot is zeroed, so the queue does not keep
// what the element pointed to alive.
func TestPopKeepsNothing(t *testing.T) {
	var q Queue[*int]
	for i := range 5 {
		q.Push(&i)
	}
	q.Pop()
	q.Pop()
	held := 0
	for _, p := range q.buf {
		if p != nil {
			held++
		}
	}
	if held != 3 {
		t.Fatalf("the buffer holds %d pointers, want the 3 queued", held)
	}
}

// TestSteadyStateMovesNothing: a queue whose length stays within its
// capacity keeps its buffer however many elements pass through it, which is
// the point of the ring: no call copies the queue.
func TestSteadyStateMovesNothing(t *testing.T) {
	var q Queue[int]
	for i := range 1000 {
		q.Push(i)
	}
	buf := &q.buf[0]
	for i := range 1_000_000 {
		q.Push(i)
		q.Pop()
	}
	if &q.buf[0] != buf {
		t.Fatal("the buffer was reallocated in the steady state")
	}
}

func TestPanics(t *testing.T) {
	for name, f := range map[string]func(q *Queue[int]){
		"Pop of empty":    func(q *Queue[int]) { q.Pop() },
		"At past the end": func(q *Queue[int]) { q.Push(1); q.At(1) },
		"At(-1)":          func(q *Queue[int]) { q.Push(1); q.At(-1) },
		"Front of empty":  func(q *Queue[int]) { q.Front() },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f(&Queue[int]{})
		})
	}
}

// BenchmarkSteady: a push and a pop at a steady length, where a slice with a
// moving head would copy its live part back every length pops.
func BenchmarkSteady(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		b.Run("len="+strconv.Itoa(n), func(b *testing.B) {
			var q Queue[[4]uint64]
			for range n {
				q.Push([4]uint64{})
			}
			b.ReportAllocs()
			for b.Loop() {
				q.Push([4]uint64{})
				q.Pop()
			}
		})
	}
}
