package iheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type item struct {
	key, idx int
}

type byKey struct{}

func (byKey) Less(a, b *item) bool    { return a.key < b.key }
func (byKey) SetIndex(x *item, i int) { x.idx = i }

func check(t *testing.T, h Heap[*item, byKey], live map[*item]bool) {
	t.Helper()
	if len(h) != len(live) {
		t.Fatalf("got %d items, want %d", len(h), len(live))
	}
	for i, x := range h {
		if x.idx != i || !live[x] {
			t.Fatalf("item %d: idx %d, live %v", i, x.idx, live[x])
		}
		if p := (i - 1) / 2; i > 0 && x.key < h[p].key {
			t.Fatalf("item %d (key %d) before its parent (key %d)", i, x.key, h[p].key)
		}
	}
}

// TestRandomOps: random pushes, removals at any position, key changes with Fix
// and pops keep the heap order and every item's index, and pops come out
// sorted.
func TestRandomOps(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var h Heap[*item, byKey]
		live := map[*item]bool{}
		for range 3000 {
			switch x := rng.IntN(10); {
			case x < 4:
				it := &item{key: rng.IntN(100)}
				h.Push(it)
				live[it] = true
			case x < 6 && len(h) > 0:
				i := rng.IntN(len(h))
				it := h[i]
				if got := h.Remove(i); got != it || got.idx != -1 {
					t.Fatalf("Remove(%d): got %p idx %d, want %p idx -1", i, got, got.idx, it)
				}
				delete(live, it)
			case x < 8 && len(h) > 0:
				i := rng.IntN(len(h))
				h[i].key = rng.IntN(100)
				h.Fix(i)
			case len(h) > 0:
				min := slices.MinFunc(h, func(a, b *item) int { return a.key - b.key }).key
				it := h.Pop()
				if it.key != min || it.idx != -1 {
					t.Fatalf("Pop: got key %d idx %d, want key %d idx -1", it.key, it.idx, min)
				}
				delete(live, it)
			}
			check(t, h, live)
		}
	}
}

// TestNoAllocations: once the storage has grown, Push and Remove allocate
// nothing.
func TestNoAllocations(t *testing.T) {
	items := make([]*item, 64)
	for i := range items {
		items[i] = &item{key: (i * 37) % 64}
	}
	var h Heap[*item, byKey]
	for _, it := range items {
		h.Push(it)
	}
	for len(h) > 0 {
		h.Pop()
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, it := range items {
			h.Push(it)
		}
		for len(h) > 0 {
			h.Remove(len(h) / 2)
		}
	}); n != 0 {
		t.Fatalf("got %v allocations per run, want 0", n)
	}
}
