package dispatcher

import (
	"hash/maphash"

	"fairdispatch/internal/fifo"
)

// memo remembers values by request id for a bounded time and count, oldest
// forgotten first, in memory independent of the ids' length: an id is kept
// as its 64-bit hash under a per-process random seed, so nobody can craft
// ids that collide (docs/decisions.md, Response path and cancellation).
// A collision would make two ids one: with n ids remembered, an id never put
// is found with probability about n / 2^64.
//
// Costs: put, get and del O(1) amortized; expire O(1) amortized per entry
// put. Memory: about 40 bytes per entry plus the value. Not safe for
// concurrent use: the queue actor owns it.
type memo[V any] struct {
	seed maphash.Seed
	max  int   // entries
	age  int64 // ns
	m    map[uint64]memoEntry[V]
	fifo fifo.Queue[memoSlot] // puts in order
	gen  uint64
}

type memoEntry[V any] struct {
	v   V
	at  int64
	gen uint64 // the put that wrote it; a FIFO slot of another put is stale
}

type memoSlot struct{ h, gen uint64 }

func newMemo[V any](max int, age int64) *memo[V] {
	return &memo[V]{seed: maphash.MakeSeed(), max: max, age: age, m: make(map[uint64]memoEntry[V])}
}

func (m *memo[V]) hash(id string) uint64 { return maphash.String(m.seed, id) }

// put remembers v for id at now (replacing what id had), forgetting the
// oldest entries beyond the bound.
func (m *memo[V]) put(now int64, id string, v V) {
	h := m.hash(id)
	m.gen++
	m.m[h] = memoEntry[V]{v: v, at: now, gen: m.gen}
	m.fifo.Push(memoSlot{h, m.gen})
	for len(m.m) > m.max || m.fifo.Len() > 2*m.max {
		m.pop()
	}
}

// get returns what is remembered for id.
func (m *memo[V]) get(id string) (V, bool) {
	e, ok := m.m[m.hash(id)]
	return e.v, ok
}

// del forgets id.
func (m *memo[V]) del(id string) { delete(m.m, m.hash(id)) }

// len returns the number of ids remembered.
func (m *memo[V]) len() int { return len(m.m) }

// expire forgets the entries put at or before now - age.
func (m *memo[V]) expire(now int64) {
	for m.fifo.Len() > 0 {
		s := *m.fifo.Front()
		if e, ok := m.m[s.h]; ok && e.gen == s.gen && now-e.at < m.age {
			return
		}
		m.pop()
	}
}

// pop drops the oldest FIFO slot and, unless a later put replaced it or it
// was deleted, its entry.
func (m *memo[V]) pop() {
	s := m.fifo.Pop()
	if e, ok := m.m[s.h]; ok && e.gen == s.gen {
		delete(m.m, s.h)
	}
}
