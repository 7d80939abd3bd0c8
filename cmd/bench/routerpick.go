package main

import (
	"fmt"
	"math/rand/v2"

	"fairdispatch/wire"
)

// The baseline routers of the fleet replay (issue 27): what an operator
// would run instead of fairdispatch. Each places a request the moment it
// arrives (no queue: requests wait inside the engines), and none shares code
// with fairdispatch's scheduler; they use only the wire protocol (wire,
// naming), the JetStream consumer API and the dispatch handshake of
// docs/protocol.md, so that the same mock engines serve every system. This
// file is their routing state and decisions; router.go runs one as a
// process.

// The routing policies.
const (
	// policyRR sends request n to worker n mod N.
	policyRR = "rr"
	// policyLL sends each request to the worker with the fewest active
	// requests (dispatched, no completion record yet), as a gateway's
	// least-request balancing does; ties at random.
	policyLL = "ll"
	// policyKV is Dynamo's KV-aware router without a queue: the least
	// cost = overlap_score_weight × potential prefill blocks + potential
	// decode blocks (ai-dynamo/dynamo, lib/llm/src/kv_router/scheduler.rs,
	// DefaultWorkerSelector::select_worker; lib/kv-router/src/sequence.rs,
	// ActiveSequences::potential_blocks_and_tokens; and its docs' "KV Cache
	// Routing, Cost Calculation"), where
	//   - potential prefill blocks = (the worker's prefill tokens + the
	//     request's tokens not in the worker's cache) / block size,
	//   - the worker's prefill tokens are what it reported in
	//     active_prefill_tokens plus what this router dispatched to it since
	//     (dispatches above the report's seen_seq: docs/protocol.md,
	//     Bookings and seen_seq); Dynamo tracks them itself until the first
	//     token, which a router outside the response path cannot see,
	//   - potential decode blocks = the distinct blocks (by block hash) of
	//     the requests routed to the worker and not finished (Dynamo's
	//     active sequences' unique_blocks: a prefix shared by several
	//     counts once), plus the request's blocks not among them
	//     (new_blocks); a request without hashes counts ceil(ISL / block
	//     size) blocks of its own. Dynamo also adds each output block as it
	//     is generated, which a router outside the response path cannot see,
	//   - the cache overlap is the longest prefix of the request's block
	//     hashes the worker holds, from its KV cache events (Dynamo's radix
	//     tree of KV events);
	// temperature 0 (Dynamo's default): the least cost, ties at random.
	policyKV = "kv"
)

// maxRouterWorkers bounds the workers of one router (a block's holders are
// a 64-bit set).
const maxRouterWorkers = 64

// booking is a dispatch the worker's reports may not count yet.
type booking struct {
	seq    uint64
	tokens uint64
}

// rworker is one worker as a router sees it.
type rworker struct {
	id  string
	idx int
	seq uint64 // last Dispatch-Seq sent

	active int            // requests dispatched, not finished
	blocks map[uint64]int // their blocks' hashes, each with the number of them holding it
	anon   int            // the blocks of those without hashes

	reportedPrefill uint64
	seenSeq         uint64
	bookings        []booking

	instance string // of its KV events
}

// decodeBlocks is w's active blocks, each shared block once.
func (w *rworker) decodeBlocks() int { return len(w.blocks) + w.anon }

// newBlocks is how many blocks a request of isl tokens with hashes would add
// to w's active blocks.
func (p *picker) newBlocks(w *rworker, isl int, hashes []uint64) int {
	if len(hashes) == 0 {
		return (isl + p.blockSize - 1) / p.blockSize
	}
	n := 0
	for _, h := range hashes {
		if w.blocks[h] == 0 {
			n++
		}
	}
	return n
}

// activeReq is a request routed and not finished: where, as which dispatch,
// and the blocks it holds there.
type activeReq struct {
	w      *rworker
	seq    uint64
	hashes []uint64
	anon   int
}

// picker is a baseline router's state. Not safe for concurrent use.
type picker struct {
	policy        string
	blockSize     int
	overlapWeight float64
	rng           *rand.Rand

	workers []*rworker
	byID    map[string]*rworker
	next    int

	held   map[uint64]uint64 // block hash -> set of worker indexes holding it
	active map[string]activeReq
	// redelivered counts requests placed again while still active: JetStream
	// delivered them again.
	redelivered int
	ties        []*rworker // scratch
}

func newPicker(policy string, blockSize int, overlapWeight float64, seed uint64) (*picker, error) {
	switch policy {
	case policyRR, policyLL, policyKV:
	default:
		return nil, fmt.Errorf("router policy %q: want rr, ll or kv", policy)
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("router block size %d: want >= 1", blockSize)
	}
	return &picker{policy: policy, blockSize: blockSize, overlapWeight: overlapWeight,
		rng: rand.New(rand.NewPCG(seed, seed^0x726f75746572)), byID: map[string]*rworker{},
		held: map[uint64]uint64{}, active: map[string]activeReq{}}, nil
}

// worker returns the worker id, adding it when new.
func (p *picker) worker(id string) (*rworker, error) {
	if w, ok := p.byID[id]; ok {
		return w, nil
	}
	if len(p.workers) == maxRouterWorkers {
		return nil, fmt.Errorf("more than %d workers", maxRouterWorkers)
	}
	w := &rworker{id: id, idx: len(p.workers), blocks: map[uint64]int{}}
	p.workers = append(p.workers, w)
	p.byID[id] = w
	return w, nil
}

// report applies a load report: the prefill tokens it counts, and the
// bookings it now covers dropped.
func (p *picker) report(rep *wire.LoadReport) {
	if rep.WorkerID == nil {
		return
	}
	w, err := p.worker(*rep.WorkerID)
	if err != nil {
		return
	}
	w.reportedPrefill = 0
	for _, rk := range rep.Ranks {
		w.reportedPrefill += rk.ActivePrefillTokens
	}
	if rep.SeenSeq != nil {
		w.seenSeq = *rep.SeenSeq
	} else {
		w.seenSeq = w.seq
	}
	kept := w.bookings[:0]
	for _, b := range w.bookings {
		if b.seq > w.seenSeq {
			kept = append(kept, b)
		}
	}
	w.bookings = kept
}

// prefillTokens is w's prefill load: reported plus booked since.
func (w *rworker) prefillTokens() uint64 {
	t := w.reportedPrefill
	for _, b := range w.bookings {
		t += b.tokens
	}
	return t
}

// overlap returns how many leading hashes w holds.
func (p *picker) overlap(w *rworker, hashes []uint64) int {
	bit := uint64(1) << w.idx
	n := 0
	for n < len(hashes) && p.held[hashes[n]]&bit != 0 {
		n++
	}
	return n
}

// pick chooses the worker of a request of isl tokens with hashes and
// returns it with its cached blocks there (0 but for policyKV); nil when no
// worker is known.
func (p *picker) pick(isl int, hashes []uint64) (*rworker, int) {
	if len(p.workers) == 0 {
		return nil, 0
	}
	switch p.policy {
	case policyRR:
		w := p.workers[p.next%len(p.workers)]
		p.next++
		return w, 0
	case policyLL:
		p.ties = p.ties[:0]
		for _, w := range p.workers {
			if len(p.ties) > 0 && w.active > p.ties[0].active {
				continue
			}
			if len(p.ties) > 0 && w.active < p.ties[0].active {
				p.ties = p.ties[:0]
			}
			p.ties = append(p.ties, w)
		}
		return p.ties[p.rng.IntN(len(p.ties))], 0
	}
	best, bestOverlap := -1.0, 0
	p.ties = p.ties[:0]
	var overlaps [maxRouterWorkers]int
	for _, w := range p.workers {
		o := p.overlap(w, hashes)
		overlaps[w.idx] = o
		newTokens := max(0, isl-o*p.blockSize)
		cost := p.overlapWeight*float64(w.prefillTokens()+uint64(newTokens))/float64(p.blockSize) +
			float64(w.decodeBlocks()+p.newBlocks(w, isl, hashes))
		switch {
		case best < 0 || cost < best:
			best = cost
			p.ties = append(p.ties[:0], w)
		case cost == best:
			p.ties = append(p.ties, w)
		}
	}
	w := p.ties[p.rng.IntN(len(p.ties))]
	bestOverlap = overlaps[w.idx]
	return w, bestOverlap
}

// dispatched books request id (isl tokens with hashes, cost uncached
// tokens) on w and returns its Dispatch-Seq.
func (p *picker) dispatched(w *rworker, id string, isl int, hashes []uint64, cost uint64) uint64 {
	if a, ok := p.active[id]; ok {
		// JetStream delivered it again (its first worker never acknowledged
		// it): that placement is given up.
		p.completed(id, a.w.id, a.seq)
		p.redelivered++
	}
	w.seq++
	w.bookings = append(w.bookings, booking{seq: w.seq, tokens: cost})
	a := activeReq{w: w, seq: w.seq, hashes: hashes}
	if len(hashes) == 0 {
		a.anon = (isl + p.blockSize - 1) / p.blockSize
	}
	for _, h := range hashes {
		w.blocks[h]++
	}
	w.anon += a.anon
	w.active++
	p.active[id] = a
	return w.seq
}

// undo releases a dispatch that was refused or went unanswered.
func (p *picker) undo(w *rworker, id string, seq uint64) {
	for i, b := range w.bookings {
		if b.seq == seq {
			w.bookings = append(w.bookings[:i], w.bookings[i+1:]...)
			break
		}
	}
	p.completed(id, w.id, seq)
}

// completed ends request id, dispatched to worker as seq (its completion
// record arrived). A record of another dispatch of the id (one placed again
// after its handshake went unanswered, then accepted late) releases
// nothing: the id's active dispatch is another.
func (p *picker) completed(id, worker string, seq uint64) {
	a, ok := p.active[id]
	if !ok || a.w.id != worker || a.seq != seq {
		return
	}
	delete(p.active, id)
	a.w.active--
	a.w.anon -= a.anon
	for _, h := range a.hashes {
		if n := a.w.blocks[h] - 1; n > 0 {
			a.w.blocks[h] = n
		} else {
			delete(a.w.blocks, h)
		}
	}
}

// kvEvent applies one KV cache event of worker id (docs/protocol.md, The
// event; parsed by wire.ParseKVEvent): a new instance or any cleared tier
// drops what the worker held (the mock engines have one tier), then removed,
// then stored.
func (p *picker) kvEvent(id string, ev *wire.KVEvent) error {
	w, err := p.worker(id)
	if err != nil {
		return err
	}
	bit := uint64(1) << w.idx
	drop := func(h uint64) {
		if s := p.held[h] &^ bit; s == 0 {
			delete(p.held, h)
		} else {
			p.held[h] = s
		}
	}
	if ev.Instance != w.instance || ev.Cleared != 0 {
		if w.instance != "" || ev.Cleared != 0 {
			for h := range p.held {
				drop(h)
			}
		}
		w.instance = ev.Instance
	}
	for _, hs := range ev.Removed {
		for _, h := range hs {
			drop(h)
		}
	}
	for _, hs := range ev.Stored {
		for _, h := range hs {
			p.held[h] |= bit
		}
	}
	return nil
}
