package mockworker

import (
	"container/list"

	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// CacheStats counts what the simulated prefix caches of a Worker saw
// (Config.KVCapacity): the prompt tokens of the requests accepted, and how
// many of them were found in a rank's cache when the request arrived.
type CacheStats struct {
	// Requests counts accepted requests carrying Dispatch-Block-Hashes.
	Requests uint64
	// PromptTokens sums Dispatch-ISL-Tokens of those requests.
	PromptTokens uint64
	// CachedTokens sums their cached prompt tokens: the longest prefix of
	// their blocks held by the rank (device or host), times BlockSize, at
	// most the request's ISL.
	CachedTokens uint64
}

// HitRate returns CachedTokens / PromptTokens, 0 without prompt tokens.
func (s CacheStats) HitRate() float64 {
	if s.PromptTokens == 0 {
		return 0
	}
	return float64(s.CachedTokens) / float64(s.PromptTokens)
}

// CacheStats returns the prefix caches' counters so far (zero without
// Config.KVCapacity).
func (m *Worker) CacheStats() CacheStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cacheStats
}

// lru is one tier of a prefix cache: block hashes, most recently used first.
type lru struct {
	order *list.List // of uint64, front = most recent
	at    map[uint64]*list.Element
}

func newLRU() *lru { return &lru{order: list.New(), at: map[uint64]*list.Element{}} }

func (c *lru) has(h uint64) bool { _, ok := c.at[h]; return ok }

// touch makes h the most recent; it reports whether h was there.
func (c *lru) touch(h uint64) bool {
	e, ok := c.at[h]
	if ok {
		c.order.MoveToFront(e)
		return true
	}
	c.at[h] = c.order.PushFront(h)
	return false
}

func (c *lru) remove(h uint64) {
	if e, ok := c.at[h]; ok {
		c.order.Remove(e)
		delete(c.at, h)
	}
}

// evict removes and returns the least recently used block.
func (c *lru) evict() uint64 {
	e := c.order.Back()
	h := e.Value.(uint64)
	c.order.Remove(e)
	delete(c.at, h)
	return h
}

func (c *lru) list() []uint64 {
	out := make([]uint64, 0, len(c.at))
	for e := c.order.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(uint64))
	}
	return out
}

// prefixCache is one rank's simulated KV prefix cache: a device tier of
// devCap blocks and an optional host tier of hostCap blocks, each LRU. A
// request's blocks are stored on the device when it arrives (a block found
// on the host moves back to the device); a block evicted from the device
// moves to the host when there is one, and a block evicted from the host is
// dropped. Every change is told to the worker helper, which publishes it as
// KV cache events (docs/protocol.md, KV cache events).
type prefixCache struct {
	devCap, hostCap int
	dev, host       *lru
}

func newPrefixCache(devCap, hostCap int) *prefixCache {
	return &prefixCache{devCap: devCap, hostCap: hostCap, dev: newLRU(), host: newLRU()}
}

// cached returns the number of leading blocks of hashes held in either tier.
func (c *prefixCache) cached(hashes []uint64) int {
	n := 0
	for n < len(hashes) && (c.dev.has(hashes[n]) || c.host.has(hashes[n])) {
		n++
	}
	return n
}

// cacheOps receives a prefix cache's changes, in order.
type cacheOps interface {
	CacheStored(rank int, tier wire.Tier, hashes []uint64) error
	CacheRemoved(rank int, tier wire.Tier, hashes []uint64) error
}

// use stores hashes on the device, in order, and evicts what no longer fits,
// telling ops of each change.
func (c *prefixCache) use(rank int, hashes []uint64, ops cacheOps) {
	one := make([]uint64, 1)
	tell := func(f func(int, wire.Tier, []uint64) error, t wire.Tier, h uint64) {
		one[0] = h
		_ = f(rank, t, one)
	}
	for _, h := range hashes {
		if c.dev.touch(h) {
			continue
		}
		if c.host.has(h) {
			c.host.remove(h)
			tell(ops.CacheRemoved, wire.Host, h)
		}
		tell(ops.CacheStored, wire.Device, h)
		for len(c.dev.at) > c.devCap {
			v := c.dev.evict()
			tell(ops.CacheRemoved, wire.Device, v)
			if c.hostCap == 0 {
				continue
			}
			c.host.touch(v)
			tell(ops.CacheStored, wire.Host, v)
			for len(c.host.at) > c.hostCap {
				tell(ops.CacheRemoved, wire.Host, c.host.evict())
			}
		}
	}
}

// held returns the blocks of each tier, for a resynchronisation.
func (c *prefixCache) held() *[wire.NumTiers][]uint64 {
	var h [wire.NumTiers][]uint64
	h[wire.Device], h[wire.Host] = c.dev.list(), c.host.list()
	return &h
}

// cacheLookup returns the blocks of r (Dispatch-Block-Hashes) and how many
// of its prompt tokens its rank's prefix cache holds; ok is false when the
// worker has no prefix cache or r carries no valid hashes. m.mu must be held.
func (m *Worker) cacheLookup(r *workerkit.Request) (hashes []uint64, cached uint64, ok bool) {
	if m.caches == nil {
		return nil, 0, false
	}
	v := workerkit.HeaderValue(r.Header, wire.HeaderBlockHashes)
	if v == "" {
		return nil, 0, false
	}
	hashes, err := wire.DecodeHashes(nil, v)
	if err != nil {
		return nil, 0, false
	}
	c := m.caches[r.DPRank-m.cfg.DPStart]
	return hashes, min(r.ISL, uint64(c.cached(hashes))*uint64(m.cfg.BlockSize)), true
}

// cacheStore counts an accepted request's hit and stores its blocks in its
// rank's prefix cache. m.mu must be held.
func (m *Worker) cacheStore(r *workerkit.Request, hashes []uint64, cached uint64) {
	m.cacheStats.Requests++
	m.cacheStats.PromptTokens += r.ISL
	m.cacheStats.CachedTokens += cached
	m.caches[r.DPRank-m.cfg.DPStart].use(r.DPRank, hashes, m.helper)
}

// resyncCache is the helper's KVConfig.Resync: it tells the helper
// everything rank's cache holds, under m.mu like every other change.
func (m *Worker) resyncCache(rank int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.helper.CacheResync(rank, m.caches[rank-m.cfg.DPStart].held()); err != nil {
		m.log.Error().Err(err).Int("dp_rank", rank).Msg("KV cache resync")
	}
}
