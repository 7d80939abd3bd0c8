package batching

import "container/list"

// CacheObserver is told of every change of an engine's prefix cache, in
// order: blocks stored (now reusable) and blocks evicted. The slices are
// reused after the call returns.
type CacheObserver interface {
	Stored(hashes []uint64)
	Removed(hashes []uint64)
}

// block is one hashed KV block of the pool: held by refs running sequences,
// and in the LRU list (evictable) when refs is 0.
type block struct {
	hash uint64
	refs int
	elem *list.Element // in pool.lru while refs == 0
}

// pool is an engine's KV block pool: hashed prompt blocks (shared between
// the sequences with the same prefix and kept as the prefix cache when no
// sequence holds them) and private blocks (a prompt's partial last block and
// its output), which are never cached. Eviction is LRU over the unheld
// hashed blocks; a sequence releases its blocks last-first, so that a
// prefix's tail is evicted before its head (as vLLM frees them).
type pool struct {
	capacity int
	blocks   map[uint64]*block
	lru      *list.List // of *block with refs == 0, front = most recently released
	private  int        // private blocks held by running sequences

	obs              CacheObserver
	stored, removed  []uint64 // scratch for the observer
	evictions, reuse uint64
}

func newPool(capacity int, obs CacheObserver) *pool {
	return &pool{capacity: capacity, blocks: map[uint64]*block{}, lru: list.New(), obs: obs}
}

// used returns the blocks held by running sequences.
func (p *pool) used() int { return len(p.blocks) - p.lru.Len() + p.private }

// prefix returns how many leading hashes the pool holds (held or cached).
// Cost: O(prefix).
func (p *pool) prefix(hashes []uint64) int {
	n := 0
	for n < len(hashes) {
		if _, ok := p.blocks[hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// fits reports whether a sequence with hashes (of which the first cached are
// in the pool) and private more blocks could be allocated now, evicting
// unheld blocks as needed. Cost: O(cached).
func (p *pool) fits(hashes []uint64, cached, private int) bool {
	evictable := p.lru.Len()
	for _, h := range hashes[:cached] {
		if p.blocks[h].refs == 0 {
			evictable-- // it will be held, not evicted
		}
	}
	need := len(hashes) - cached + private
	free := p.capacity - len(p.blocks) - p.private
	return need <= free+evictable
}

// acquire holds the blocks of hashes (the first cached already in the pool)
// and private more, evicting the least recently released unheld blocks to
// make room, and tells the observer: evicted blocks first, then the stored
// ones. The caller has checked fits. Cost: O(len(hashes) + evictions).
func (p *pool) acquire(hashes []uint64, private int) []*block {
	held := make([]*block, 0, len(hashes))
	p.removed, p.stored = p.removed[:0], p.stored[:0]
	for _, h := range hashes {
		if b, ok := p.blocks[h]; ok {
			if b.refs == 0 {
				p.lru.Remove(b.elem)
				b.elem = nil
				p.reuse++
			}
			b.refs++
			held = append(held, b)
			continue
		}
		p.makeRoom(1)
		b := &block{hash: h, refs: 1}
		p.blocks[h] = b
		held = append(held, b)
		p.stored = append(p.stored, h)
	}
	p.makeRoom(private)
	p.private += private
	if p.obs != nil {
		if len(p.removed) > 0 {
			p.obs.Removed(p.removed)
		}
		if len(p.stored) > 0 {
			p.obs.Stored(p.stored)
		}
	}
	return held
}

// makeRoom evicts unheld blocks until n more fit (or none is left).
func (p *pool) makeRoom(n int) {
	for len(p.blocks)+p.private+n > p.capacity && p.lru.Len() > 0 {
		b := p.lru.Remove(p.lru.Back()).(*block)
		delete(p.blocks, b.hash)
		p.removed = append(p.removed, b.hash)
		p.evictions++
	}
}

// release drops a sequence's hold on its blocks, last first; blocks no
// sequence holds become the most recently used of the cache. Cost:
// O(len(held)).
func (p *pool) release(held []*block, private int) {
	for i := len(held) - 1; i >= 0; i-- {
		b := held[i]
		if b.refs--; b.refs == 0 {
			b.elem = p.lru.PushFront(b)
		}
	}
	p.private -= private
}

// cachedHashes returns every hashed block in the pool (held or cached), for
// a resynchronisation.
func (p *pool) cachedHashes() []uint64 {
	out := make([]uint64, 0, len(p.blocks))
	for h := range p.blocks {
		out = append(out, h)
	}
	return out
}
