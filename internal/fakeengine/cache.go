package fakeengine

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
)

// blockKey is the engine's hash of a block: sha256 over the parent's hash
// and the block's token ids, as vLLM's hash_block_tokens chains them
// (vllm/v1/core/kv_cache_utils.py; the seed of the first block, NONE_HASH,
// is fixed here: vLLM draws it at random unless PYTHONHASHSEED is set).
type blockKey [32]byte

func hashBlock(parent blockKey, tokens []uint32) blockKey {
	h := sha256.New()
	h.Write(parent[:])
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	var k blockKey
	copy(k[:], h.Sum(nil))
	return k
}

// noneHash is the parent of every prompt's first block.
var noneHash = blockKey{'n', 'o', 'n', 'e'}

// prefixCache is an LRU cache of blocks; it is not safe for concurrent use.
type prefixCache struct {
	capacity int
	lru      *list.List // front: most recently used; values are blockKey
	at       map[blockKey]*list.Element
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, lru: list.New(), at: map[blockKey]*list.Element{}}
}

// chain returns the keys of the full blocks of tokens.
func chain(tokens []uint32, bs int) []blockKey {
	var out []blockKey
	parent := noneHash
	for i := 0; i+bs <= len(tokens); i += bs {
		parent = hashBlock(parent, tokens[i:i+bs])
		out = append(out, parent)
	}
	return out
}

// hits returns how many of keys, from the first, are cached.
func (c *prefixCache) hits(keys []blockKey) int {
	for i, k := range keys {
		if _, ok := c.at[k]; !ok {
			return i
		}
	}
	return len(keys)
}

// insert stores keys[from:] and touches all of keys, the last one first so
// that a prompt's later blocks are evicted before its earlier ones (vLLM
// frees a request's blocks in reverse order). It returns the keys evicted.
func (c *prefixCache) insert(keys []blockKey, from int) (evicted []blockKey) {
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.at[keys[i]]; ok {
			c.lru.MoveToFront(e)
		}
	}
	for _, k := range keys[from:] {
		if _, ok := c.at[k]; ok {
			continue
		}
		c.at[k] = c.lru.PushBack(k) // new blocks: behind their parents, in front of older ones
		c.lru.MoveToFront(c.at[k])
	}
	// Put the prompt's blocks back in parent-first recency order.
	for i := len(keys) - 1; i >= 0; i-- {
		c.lru.MoveToFront(c.at[keys[i]])
	}
	for c.lru.Len() > c.capacity {
		e := c.lru.Back()
		k := e.Value.(blockKey)
		c.lru.Remove(e)
		delete(c.at, k)
		evicted = append(evicted, k)
	}
	return evicted
}

func (c *prefixCache) clear() {
	c.lru.Init()
	c.at = map[blockKey]*list.Element{}
}

func (c *prefixCache) len() int { return c.lru.Len() }
