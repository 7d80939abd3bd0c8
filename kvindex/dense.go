package kvindex

import (
	"math/bits"

	"fairdispatch/wire"
)

// A block held by many ranks also gets a dense form: one bitset per tier
// over the rank slots, next to its holder slice (which stays complete, so
// Apply and the sparse walk are unchanged). The overlap query walks dense
// blocks a word of 64 slots at a time (see "Cost" in the package doc).
//
// A block gets its dense form when a store brings it to denseOn(words)
// holders and loses it when a removal brings it under denseOff(words), where
// words is the bitsets' length in 64-bit words (the highest holder slot / 64,
// plus one): the bitsets then take at most 4 bytes per holder, and the gap
// between the two thresholds keeps a block near them from switching at each
// operation.
const (
	denseMin    = 16 // holders for a dense form, at least
	denseMinOff = 8  // holders under which the dense form goes, at least
)

func denseOn(words int) int  { return max(denseMin, 8*words) }
func denseOff(words int) int { return max(denseMinOff, 4*words) }

// dense is the dense form of a block's holders: bit s of [s/64][k] is set
// when slot s holds the block in tier order[k] (the tiers by decreasing
// weight, see Index.order), so that the query reads a word's tiers at once.
type dense [][wire.NumTiers]uint64

func newDense(words int) dense { return make(dense, words) }

func (d dense) words() int { return len(d) }

// denseFor returns the dense form of block h with holders hs, or nil.
func (x *Index) denseFor(h uint64, hs []uint32) dense {
	if len(hs) < denseMinOff || len(x.dense) == 0 {
		return nil
	}
	return x.dense[h]
}

// densify gives block h (holders hs, no dense form yet) its dense form if it
// has enough holders for the slots they span.
func (x *Index) densify(h uint64, hs []uint32) {
	if len(hs) < denseMin {
		return
	}
	var top uint32
	for _, e := range hs {
		top = max(top, e>>slotShift)
	}
	words := int(top>>6) + 1
	if len(hs) < denseOn(words) {
		return
	}
	d := newDense(words)
	for _, e := range hs {
		x.denseBits(d, int32(e>>slotShift), e&tierMask, true)
	}
	x.dense[h] = d
}

// denseBits sets (or clears) the tier bits of slot s in d; s is within d
// when setting.
func (x *Index) denseBits(d dense, s int32, bits uint32, set bool) {
	w := int(s >> 6)
	if w >= len(d) {
		return
	}
	m := uint64(1) << (s & 63)
	for k, t := range x.order {
		if bits&(1<<t) != 0 {
			if set {
				d[w][k] |= m
			} else {
				d[w][k] &^= m
			}
		}
	}
}

// denseSet sets tier bit of slot s in block h's dense form d (n holders),
// growing the bitsets for a higher slot, or dropping the dense form if the
// holders are then too few for the slots they span.
func (x *Index) denseSet(h uint64, d dense, n int, s int32, bit uint32) {
	if w := int(s >> 6); w >= d.words() {
		if n < denseOff(w+1) {
			delete(x.dense, h)
			return
		}
		g := newDense(w + 1)
		copy(g, d)
		d = g
		x.dense[h] = d
	}
	x.denseBits(d, s, bit, true)
}

// denseWord is the dense walk's state of 64 slots: those whose prefix is
// still extending, those of them whose best tier changed along the prefix,
// and the class (0 to 3, see classes) of the best tier of the others, the
// same at every block so far, in two bit planes.
type denseWord struct {
	active, mixed uint64
	c0, c1        uint64
}

// classes returns the two bit planes of the class of each slot's best tier in
// a dense word (the tier bitsets by decreasing weight): class k when ts[k] is
// the first to have the slot's bit; meaningless for slots in no tier.
func classes(ts *[wire.NumTiers]uint64) (c0, c1 uint64) {
	return ^ts[0] & (ts[1] | ^ts[2]), ^(ts[0] | ts[1])
}

// walkDense is the overlap query over dense blocks, from block 0 which has
// the dense form d0. It keeps the bitset of the ranks whose prefix is still
// extending and, per tier class k (the tiers in decreasing weight order), the
// bitset pure[k] of those whose best tier has been of class k at every block
// so far: their weight is sums[k], the running sum of that class's weight,
// added in the same order as a per-rank sum would, so that results are
// bit-for-bit those of the sparse walk. A rank whose best tier changes takes
// its weight so far into acc and adds its weights one by one from then on
// (the bitset mixed). The walk returns at the first block without a dense
// form (the ranks still extending are then in acc and touched, with prefix
// length i, for the sparse walk to go on from block i) and returns that i,
// or len(hashes) when done.
func (x *Index) walkDense(hashes []uint64, d0 dense, out *Overlaps) int {
	nw := d0.words()
	if len(out.words) < nw {
		out.words = make([]denseWord, max(nw, len(x.slots)/64+1, 2*len(out.words)))
	}
	st := out.words[:nw]
	for w := range st {
		ts := &d0[w]
		c0, c1 := classes(ts)
		st[w] = denseWord{active: ts[0] | ts[1] | ts[2] | ts[3], c0: c0, c1: c1}
	}
	acc, wk, bestOrd := out.acc, &x.orderW, &x.bestOrd
	var sums [wire.NumTiers]float64
	// finish records the prefix of the slot of bit b of word w, of length n.
	finish := func(w, b int, n int32) {
		s := w<<6 | b
		p := &acc[s]
		p.n = n
		if sw := &st[w]; sw.mixed>>b&1 == 0 {
			p.w = sums[sw.c0>>b&1|sw.c1>>b&1<<1]
		}
		out.touched = append(out.touched, int32(s))
	}
	// lo and hi bound the words with an active slot. The lookups go in
	// batches, as in the sparse walk, so that the processor overlaps their
	// cache misses.
	lo, hi := 0, nw
	const lookahead = 8
	var batch [lookahead]dense
	for i := range hashes {
		dw := d0
		if i > 0 {
			j := (i - 1) % lookahead
			if j == 0 {
				for k := range min(lookahead, len(hashes)-i) {
					batch[k] = x.dense[hashes[i+k]]
				}
			}
			if dw = batch[j]; dw == nil {
				// Hand the ranks still extending over to the sparse walk.
				for w := lo; w < hi; w++ {
					for a := st[w].active; a != 0; a &= a - 1 {
						finish(w, bits.TrailingZeros64(a), int32(i))
					}
				}
				return i
			}
		}
		newLo, newHi := hi, lo
		for w := lo; w < hi; w++ {
			sw := &st[w]
			a := sw.active
			if a == 0 {
				continue
			}
			var ts [wire.NumTiers]uint64
			if w < len(dw) {
				ts = dw[w]
			}
			any := ts[0] | ts[1] | ts[2] | ts[3]
			for gone := a &^ any; gone != 0; gone &= gone - 1 {
				finish(w, bits.TrailingZeros64(gone), int32(i))
			}
			a &= any
			sw.active = a
			if a == 0 {
				continue
			}
			newLo, newHi = min(newLo, w), max(newHi, w+1)
			// A rank whose best tier is not of its class any more becomes
			// mixed, with the weight of blocks 0..i-1.
			c0, c1 := classes(&ts)
			if dev := ((c0 ^ sw.c0) | (c1 ^ sw.c1)) & a &^ sw.mixed; dev != 0 {
				sw.mixed |= dev
				for ; dev != 0; dev &= dev - 1 {
					b := bits.TrailingZeros64(dev)
					acc[w<<6|b].w = sums[sw.c0>>b&1|sw.c1>>b&1<<1]
				}
			}
			for mx := sw.mixed & a; mx != 0; mx &= mx - 1 {
				b := bits.TrailingZeros64(mx)
				set := uint32(ts[0]>>b&1) | uint32(ts[1]>>b&1)<<1 | uint32(ts[2]>>b&1)<<2 | uint32(ts[3]>>b&1)<<3
				acc[w<<6|b].w += bestOrd[set]
			}
		}
		if newLo >= newHi {
			return len(hashes)
		}
		lo, hi = newLo, newHi
		sums[0] += wk[0]
		sums[1] += wk[1]
		sums[2] += wk[2]
		sums[3] += wk[3]
	}
	for w := lo; w < hi; w++ {
		for a := st[w].active; a != 0; a &= a - 1 {
			finish(w, bits.TrailingZeros64(a), int32(len(hashes)))
		}
	}
	return len(hashes)
}
