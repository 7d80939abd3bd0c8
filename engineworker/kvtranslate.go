package engineworker

// The translation of decoded engine events (kvdecode.go) into fairdispatch
// cache changes: the engine's block hashes are its own (vLLM: sha256 of the
// parent hash, the tokens and extra keys, vllm/v1/core/kv_cache_utils.py), so
// ours are recomputed from the events' token ids by the rule of
// docs/protocol.md, Block hashes, chained through a map from the engine's
// hash of a block to the state of our chain after it.

import (
	"errors"
	"fmt"
	"strings"

	"fairdispatch/wire"
)

// TierOf maps an engine's medium to a tier: none or "GPU" is the device
// (vllm/distributed/kv_events.py MEDIUM_GPU), "CPU" the host (MEDIUM_CPU),
// and so is SGLang HiCache's "CPU_PINNED" (python/sglang/srt/disaggregation/
// kv_events.py, StorageMedium.CPU); "DISK" and "STORAGE" (MEDIUM_STORAGE)
// the disk, and so is HiCache's "EXTERNAL" (its storage backend: counted for
// the rank that reported it only, even where the backend is shared). Another
// medium is an error naming it.
func TierOf(medium string) (wire.Tier, error) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE":
		return wire.Device, nil
	case "CPU", "HOST", "CPU_PINNED":
		return wire.Host, nil
	case "DISK", "STORAGE", "SSD", "EXTERNAL":
		return wire.Disk, nil
	case "SHARED":
		return wire.Shared, nil
	}
	return 0, fmt.Errorf("%w: medium %q", ErrLayout, medium)
}

// Op is the kind of a [Change].
type Op uint8

// The kinds of changes.
const (
	OpStored Op = iota + 1
	OpRemoved
	OpCleared // every tier, the rank is empty
)

// Change is one change of a rank's caches in fairdispatch's terms.
type Change struct {
	Op     Op
	Tier   wire.Tier // OpStored and OpRemoved
	Hashes []uint64  // OpStored and OpRemoved
}

// ErrUnknownParent is returned by [Chain.Apply] for a BlockStored whose
// parent the chain does not hold: events were missed.
var ErrUnknownParent = errors.New("kv events: parent block unknown")

// ErrCollision is returned by [Chain.Apply] for a BlockStored of a block it
// holds under another parent: the engine's hashes do not chain the blocks
// before (SGLang before its position-aware hashes named a page by its own
// tokens). The block and the rest of the event are skipped, as the index
// must not claim what the engine may not hold; the rank is not reset, which
// would not help.
var ErrCollision = errors.New("kv events: a block stored again under another parent (the engine's block hashes do not chain its prefix)")

// FNV-1a 64 (docs/protocol.md, Block hashes).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// blockHash is the hash of one block of ours: FNV-1a 64 over prev as 8 bytes
// little-endian, then each token as 4 bytes little-endian.
func blockHash(prev uint64, tokens []uint32) uint64 {
	h := uint64(fnvOffset)
	for i := range 8 {
		h ^= (prev >> (8 * i)) & 0xff
		h *= fnvPrime
	}
	for _, t := range tokens {
		for i := range 4 {
			h ^= uint64(t>>(8*i)) & 0xff
			h *= fnvPrime
		}
	}
	return h
}

// chainState is our chain after some engine block: the hash of our last
// full block and the tokens since (fewer than our block size).
type chainState struct {
	prev       uint64
	pending    []uint32
	unhashable bool // this block or one before it depends on more than tokens
}

// engineBlock is what the chain knows of one engine block.
//
// An engine may hold several copies of one block in a tier: vLLM does not
// de-duplicate its cache (vllm/v1/core/block_pool.py: two requests that fill
// the same block each keep theirs, and each copy is stored, and removed, with
// an event of its own). The block stays in a tier until its last copy there
// is removed. A copy stored before we listened is not counted, so its removal
// may take the block out while the engine still holds it: the index then
// under-reports, which costs a cache hit, never a wrong route.
type engineBlock struct {
	after  chainState
	parent string   // the engine hash of the block before it in its chain; "" for a first block
	ours   []uint64 // our blocks this engine block completed
	tiers  wire.Tiers
	copies [wire.NumTiers]uint32 // copies stored in each tier of tiers
}

// store counts one more copy of b in tier t.
func (b *engineBlock) store(t wire.Tier) {
	b.tiers |= wire.Tiers(1) << t
	b.copies[t]++
}

// remove counts one copy of b in tier t gone, and reports whether it was the
// last there; a tier b is not known in is left alone (false).
func (b *engineBlock) remove(t wire.Tier) bool {
	if b.copies[t] == 0 {
		return false // never stored here, or stored before we listened
	}
	b.copies[t]--
	if b.copies[t] > 0 {
		return false
	}
	b.tiers &^= wire.Tiers(1) << t
	return true
}

// Chain translates one rank's engine events. It is not safe for concurrent use.
type Chain struct {
	blockSize int
	group     int
	maxBlocks int
	blocks    map[string]*engineBlock
	// Skipped counts engine blocks stored without a hash of ours (unhashable
	// content, a parent unknown, another KV cache group).
	Skipped uint64
}

// NewChain returns a chain cutting our blocks of blockSize tokens, keeping the
// events of KV cache group group (and those without a group), and holding at
// most maxBlocks engine blocks (past it Apply returns ErrOverflow).
func NewChain(blockSize, group, maxBlocks int) *Chain {
	return &Chain{blockSize: blockSize, group: group, maxBlocks: maxBlocks, blocks: map[string]*engineBlock{}}
}

// ErrOverflow is returned by Apply when the chain would hold more than its bound.
var ErrOverflow = errors.New("kv events: too many engine blocks held")

// Len returns the number of engine blocks the chain holds.
func (c *Chain) Len() int { return len(c.blocks) }

// Reset forgets every block.
func (c *Chain) Reset() { c.blocks = map[string]*engineBlock{} }

// Held returns our hashes per tier, indexed by tier, of every block held:
// the snapshot of a resynchronisation. Cost: O(blocks).
func (c *Chain) Held() [wire.NumTiers][]uint64 {
	var out [wire.NumTiers][]uint64
	for _, b := range c.blocks {
		for t := range wire.NumTiers {
			if b.tiers.Has(t) {
				out[t] = append(out[t], b.ours...)
			}
		}
	}
	return out
}

// Apply translates ev, appending its changes to out. On ErrUnknownParent,
// ErrOverflow or a medium it cannot map, the changes of the blocks before
// the failing one are appended and the rest of the event is dropped.
func (c *Chain) Apply(ev Event, out []Change) ([]Change, error) {
	if ev.Group >= 0 && ev.Group != c.group && ev.Kind != AllBlocksCleared {
		if ev.Kind == BlockStored {
			c.Skipped += uint64(len(ev.Hashes))
		}
		return out, nil
	}
	switch ev.Kind {
	case AllBlocksCleared:
		c.Reset()
		return append(out, Change{Op: OpCleared}), nil
	case BlockRemoved:
		tier, err := TierOf(ev.Medium)
		if err != nil {
			return out, err
		}
		var gone []uint64
		for _, h := range ev.Hashes {
			b := c.blocks[h]
			if b == nil || !b.remove(tier) {
				continue // another copy stays, or never stored here
			}
			gone = append(gone, b.ours...)
			if b.tiers == 0 {
				delete(c.blocks, h)
			}
		}
		if len(gone) > 0 {
			out = append(out, Change{Op: OpRemoved, Tier: tier, Hashes: gone})
		}
		return out, nil
	case BlockStored:
		return c.stored(ev, out)
	}
	return out, fmt.Errorf("%w: event kind %d", ErrLayout, ev.Kind)
}

func (c *Chain) stored(ev Event, out []Change) ([]Change, error) {
	tier, err := TierOf(ev.Medium)
	if err != nil {
		return out, err
	}
	if len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
		// An offloading medium may store known blocks without their tokens.
		if len(ev.Tokens) != 0 {
			return out, fmt.Errorf("%w: BlockStored with %d tokens for %d blocks of %d",
				ErrLayout, len(ev.Tokens), len(ev.Hashes), ev.BlockSize)
		}
	}
	var state chainState
	if ev.Parent != "" {
		p := c.blocks[ev.Parent]
		if p == nil {
			c.Skipped += uint64(len(ev.Hashes))
			return out, ErrUnknownParent
		}
		state = p.after
	}
	var stored []uint64
	var failure error
	parent := ev.Parent
	for i, h := range ev.Hashes {
		if b := c.blocks[h]; b != nil {
			if len(ev.Tokens) > 0 && b.parent != parent {
				// A store of computed blocks lists a chain; an offload
				// without tokens may list any blocks, so only the first
				// kind is checked.
				c.Skipped += uint64(len(ev.Hashes) - i)
				failure = ErrCollision
				break
			}
			// Known (stored in another tier, or another copy): same tokens,
			// same hashes.
			b.store(tier)
			stored = append(stored, b.ours...)
			state, parent = b.after, h
			continue
		}
		if len(ev.Tokens) == 0 {
			c.Skipped += uint64(len(ev.Hashes) - i)
			failure = ErrUnknownParent
			break
		}
		if len(c.blocks) >= c.maxBlocks {
			failure = ErrOverflow
			break
		}
		b := &engineBlock{parent: parent}
		b.store(tier)
		toks := ev.Tokens[i*ev.BlockSize : (i+1)*ev.BlockSize]
		b.after = c.advance(state, toks, ev.Unhashable, &b.ours)
		if b.after.unhashable {
			c.Skipped++
		}
		c.blocks[h] = b
		stored = append(stored, b.ours...)
		state, parent = b.after, h
	}
	if len(stored) > 0 {
		out = append(out, Change{Op: OpStored, Tier: tier, Hashes: stored})
	}
	return out, failure
}

// advance feeds toks to the chain state s, appending to ours the hashes of
// our blocks it completes.
func (c *Chain) advance(s chainState, toks []uint32, unhashable bool, ours *[]uint64) chainState {
	next := chainState{prev: s.prev, unhashable: s.unhashable || unhashable}
	if next.unhashable {
		return next
	}
	pend := append(make([]uint32, 0, c.blockSize), s.pending...)
	for len(toks) > 0 {
		k := min(c.blockSize-len(pend), len(toks))
		pend = append(pend, toks[:k]...)
		toks = toks[k:]
		if len(pend) == c.blockSize {
			next.prev = blockHash(next.prev, pend)
			*ours = append(*ours, next.prev)
			pend = pend[:0]
		}
	}
	if len(pend) > 0 {
		next.pending = append([]uint32(nil), pend...)
	}
	return next
}
