// Package kvindex is the KV cache index: which worker rank holds which prompt
// blocks in which cache tier, fed by the workers' cache events and queried for
// the overlap of a request's blocks with each rank (docs/protocol.md, KV cache
// events; docs/design.md, KV cache index).
//
// # Usage
//
// The queue actor builds one [Index] with [New] and:
//
//   - for each message of the KV event stream, decodes its body with
//     [wire.ParseKVEvent] and applies it with [Index.Apply] under the worker id of
//     its subject; then it asks [Index.TakeStale] which ranks to ask for a
//     resynchronisation;
//   - calls [Index.DropWorker] when a worker leaves the fleet;
//   - for a request with block hashes (decoded by [wire.DecodeHashes] from
//     Dispatch-Block-Hashes), calls [Index.Overlap] with a reused [Overlaps]
//     at admission ([Overlaps.Best]) and at dispatch ([Overlaps.Of] per rank).
//
// Producers and workers compute the hashes with [wire.ChainHashes]; workers encode
// events with [wire.EncodeKVEvent]. [ParseWeights] reads the tier weights' flag.
//
// # What a block hash means
//
// A prompt is cut into blocks of the engine's block size; block i's hash is
// chained: it hashes block i's tokens together with block i-1's hash
// ([wire.ChainHashes]), so hash i identifies the whole prefix 0..i, and two prompts
// share hash i exactly when they share blocks 0..i (up to 64-bit collisions).
// Because of the chaining, a flat map from hash to holders is enough: no tree
// is needed to tell prefixes apart.
//
// # Algorithm
//
// The index is a hash map from block hash to its holders: a small slice of
// entries, each a rank slot (one per (worker, dp_rank)) and the set of tiers
// (device, host, disk, shared) in which that rank holds the block. Each rank
// slot also keeps the list of hashes it holds, so that a clear costs the
// rank's blocks and not the whole index; the list is cleaned lazily (a
// removal leaves its entry behind; the list is compacted when it passes
// twice the blocks held plus 16).
//
// The overlap query walks the request's hashes in order. Block 0's holders
// start with a prefix of 1; at block i, a holder whose prefix is exactly i
// extends it to i+1 and adds the weight of its best tier for that block; the
// walk stops at the first block that extends no prefix. A rank's prefix
// therefore ends at its first miss: the overlap of rank r is
//
//	L_r = the largest L such that r holds hashes[i] in some tier for all i < L
//	W_r = the sum over i < L_r of max { weight(t) : r holds hashes[i] in tier t }
//
// # Dense blocks
//
// A block held by many ranks also has a dense form: four bitsets over the
// rank slots (one per tier, in decreasing weight order), next to its holder
// slice, which stays complete so that Apply and the walk above are unchanged
// for it. A block gets the dense form when a store brings it to
// max(16, 8*words) holders, where words is the bitsets' length in 64-bit
// words (the highest holder slot / 64, plus one), and loses it when a removal
// brings it under max(8, 4*words); so the bitsets take at most 4 bytes per
// holder (at most 8 once grown by a higher slot), a block switches at most
// once per 8 holder changes, and an index whose many ranks spread their
// blocks thinly (slots numbered far beyond the holders) keeps slices only.
// Slots are dense small integers: a new rank takes the last freed slot, else
// the next one.
//
// A query whose block 0 has the dense form walks the dense forms a word of 64
// slots at a time, with the bitset of the ranks whose prefix still extends:
// at block i, the active ranks outside the block's tiers end their prefix at
// i. Each rank's weight is kept without per-rank work while its best tier
// keeps the same class (the same rank in weight order) along its prefix: a
// running sum per class, added block after block in the same order as a
// per-rank sum, gives that rank's weight at the block where it ends. A rank
// whose best tier changes class takes its running sum at that block and adds
// its weights one by one from then on. The results are the walk above's bit
// for bit. At the first block without a dense form the ranks still extending
// go on with the walk above.
//
// The index does not assume that a rank holding block i holds blocks 0..i-1
// (an engine may evict a parent before its child, and an event carries no
// parent hash, so the index could not enforce it): such a rank's prefix ends
// at the missing parent, exactly as the definition says.
//
// # Sequences, instances and staleness
//
// Events of one worker carry its instance (the worker process) and, per
// dp_rank, an event_id counting 1, 2, 3... within the instance. The index
// applies an event of rank r of worker w as follows:
//
//  1. A new instance for w drops all of w's ranks' blocks, forgets their
//     sequences and staleness (the new process starts empty).
//  2. event_id <= the rank's last: a duplicate (a redelivery), ignored.
//  3. event_id > last+1 (or, the first event of the rank in this instance,
//     event_id > 1): a gap, some event was lost; the rank becomes stale,
//     unless this event is itself a resynchronisation (step 4).
//  4. cleared naming all four tiers is a resynchronisation: the rank's blocks
//     are dropped and it is no longer stale. A partial cleared drops those
//     tiers of a rank that is not stale.
//  5. A stale rank ignores removed and stored. Otherwise removed is applied
//     (unknown blocks are no-ops), then stored.
//
// A stale rank holds no blocks (they are dropped when it becomes stale), so
// its overlap is 0 until it resynchronises. [Index.TakeStale] hands the ranks
// that became stale to the caller, which asks those workers to resynchronise.
//
// # Bounded memory
//
// The index holds at most MaxBlocks (rank, block) pairs. A store that would
// pass the bound first evicts the rank holding the most blocks (the storing
// rank on a tie): its blocks are dropped and it is marked stale, as after a
// gap, and TakeStale reports it. The largest rank is the one most likely to
// be misbehaving, and dropping it frees the most room at once; the others keep
// exact indexes. If the evicted rank is the storing one, the rest of the
// event is ignored. The bound is a safety net and should exceed the fleet's
// total cache capacity in blocks; a rank whose own resynchronisation exceeds
// the bound stays stale.
//
// The index also tracks at most MaxRanks worker ranks; an event of a further
// rank is refused. The caller applies only events of workers it knows and
// drops those that leave ([Index.DropWorker]).
//
// # Invariants
//
//   - Each holder slice of the map is non-empty, names each slot at most
//     once, and every entry has at least one tier bit.
//   - A slot's held equals the number of map entries naming it; the index's
//     total is the sum of held and is at most MaxBlocks; the per-tier counts
//     are the numbers of tier bits set.
//   - A block has a dense form only if it has at least max(8, 4*words)
//     holders; its bitsets hold exactly the tier bits of its holder slice.
//   - A stale slot holds no blocks.
//   - A slot's list contains every hash the slot holds (and possibly stale
//     entries); its length is at most 2*held+16 after each removal.
//
// # References
//
//   - NVIDIA Dynamo's KV router indexer: a radix tree over chained block
//     hashes fed by the workers' KV events over NATS, one tree shared by all
//     workers; it relies on parent hashes carried by the events.
//   - SGLang's cache-aware router: an approximate radix tree of the prompts it
//     sent to each worker, without events from the engines.
//   - llm-d's KV cache manager: an index fed by vLLM's KV events (stored and
//     removed block hashes, all-blocks-cleared), keyed by block hash, with a
//     medium per block.
//
// This index differs by knowing tiers per rank, by being exact per dp_rank,
// and by gap detection and resynchronisation, which let it be fed from a
// durable stream and rebuilt by replaying it after a restart of the
// dispatcher (docs/protocol.md, Resynchronisation).
//
// # Cost
//
// [Index.Apply] costs O(1) map operations per stored or removed hash (a scan
// of the block's holders to find the rank, plus a dense form's bit and one
// more lookup for a block of 8 holders or more; O(holders) when the block
// gains or loses its dense form), plus O(blocks of the rank) for a clear or
// a resynchronisation, O(blocks of the worker) for a new instance, and
// O(ranks + blocks of the victim) for an eviction. [Index.Overlap] costs one
// map lookup per block up to the longest prefix any rank holds (plus one for
// the first miss), and one step per holder entry of those blocks; when block
// 0 and the following ones have dense forms, one step per 64 slots per block
// instead, plus O(1) per rank with a prefix and one step per block of a
// prefix after its best tier changed class. It does not allocate once its
// [Overlaps] buffer has grown to the index's number of rank slots.
// [Overlaps.Of] then finds a rank's result in O(hits) up to 8 hits, else
// with one map lookup.
//
// Measured (docs/bench.md, KV cache index; a 512-block prompt over 256
// ranks holding 4096 blocks each, median of 5 on a shared machine): all 256
// holding the whole prompt, 207 us with the holder slices alone, 19.6 us with
// the dense forms; every rank holding a prefix of it, 144 us and 16 us; one
// rank holding it, about 7 us either way.
//
// Memory is proportional to the (rank, block) pairs held: one 4-byte holder
// entry and one 8-byte list entry per pair, plus per distinct hash a map
// entry (an 8-byte key and a 24-byte slice header) and its holder slice's
// allocation. A dense block adds a map entry of the dense forms (an 8-byte
// key, a 24-byte slice header) and 32 bytes per 64 slots of its bitsets.
// Go maps do not shrink, so the maps' sizes follow the peak numbers of
// distinct hashes, which the bound caps.
//
// # Concurrency
//
// An Index is not safe for concurrent use. It has no goroutines, locks,
// clocks or I/O: the queue actor owns it.
package kvindex
