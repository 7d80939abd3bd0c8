package tokenizer

import "strings"

// byteChar is GPT-2's byte-to-character table (the ByteLevel alphabet): the
// printable bytes stand for themselves, the others for 256 and up, so that
// every byte is one character of the vocabulary.
var byteChar = func() [256]rune {
	var t [256]rune
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff {
			t[b] = rune(b)
		} else {
			t[b] = rune(256 + n)
			n++
		}
	}
	return t
}()

// merge is one merge rule: the rank of a pair of ids and the id it makes.
type merge struct {
	rank int32
	id   uint32
}

// maxCachedLen is the longest pre-token whose ids are cached, as the Hugging
// Face library caches only words under 256 bytes: longer ones are rare in
// text (a run of spaces or of one letter) and would hold memory for nothing.
const maxCachedLen = 256

// maxCached bounds the pre-tokens whose ids are kept (as the Hugging Face
// library keeps a cache of words): the first ones seen, each at most
// maxCachedLen bytes and copied out of its request's text, so about 40 MB at
// most and nothing of any request pinned.
const maxCached = 100_000

// bpe appends the ids of one pre-token: its bytes as ByteLevel characters,
// merged pair by pair, always the adjacent pair of the lowest merge rank
// (the leftmost of equals), as the Hugging Face library's BPE does; with
// ignore_merges (Llama 3's files), a pre-token that is in the vocabulary
// whole is that one id.
func (t *Tokenizer) bpe(piece string, ids []uint32) []uint32 {
	if v, ok := t.cache.Load(piece); ok {
		return append(ids, v.([]uint32)...)
	}
	start := len(ids)
	ids = t.merge(piece, ids)
	if len(piece) <= maxCachedLen && t.cached.Add(1) <= maxCached {
		t.cache.Store(strings.Clone(piece), append([]uint32(nil), ids[start:]...))
	}
	return ids
}

// symbol is one symbol of a word being merged: a token id in a doubly linked
// list over the word's bytes; a symbol merged into its left neighbour is
// gone (size 0).
type symbol struct {
	id         uint32
	prev, next int32 // -1: none
	size       int32 // bytes covered; 0 once merged away
}

// candidate is a merge waiting in the queue: the pair that starts at symbol
// pos, of the given rank, making id.
type candidate struct {
	rank int32
	pos  int32
	id   uint32
}

// queue is a min-heap of candidates: the lowest rank first, the leftmost of
// equal ranks, as the Hugging Face library's Word::merge_all orders them.
// (Typed rather than container/heap's: that boxes every candidate pushed.)
type queue []candidate

func (q queue) less(i, j int) bool {
	return q[i].rank < q[j].rank || q[i].rank == q[j].rank && q[i].pos < q[j].pos
}

// init orders a queue filled in any order.
func (q queue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

func (q *queue) push(c candidate) {
	*q = append(*q, c)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *queue) pop() candidate {
	h := *q
	c := h[0]
	last := len(h) - 1
	h[0] = h[last]
	*q = h[:last]
	q.down(0)
	return c
}

func (q queue) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

// merge appends the ids of piece. It keeps the candidate merges in a heap
// and skips those that went stale (a symbol merged away or grown since), as
// the Hugging Face library does, so a piece costs O(n log n) in its bytes:
// a long run of one character (spaces, say) is one piece.
func (t *Tokenizer) merge(piece string, ids []uint32) []uint32 {
	if t.ignoreMerges {
		var b strings.Builder
		b.Grow(2 * len(piece))
		for i := 0; i < len(piece); i++ {
			b.WriteRune(byteChar[piece[i]])
		}
		if id, ok := t.vocab[b.String()]; ok {
			return append(ids, id)
		}
	}
	n := len(piece)
	if n == 0 {
		return ids
	}
	if n == 1 {
		return append(ids, t.byteID[piece[0]])
	}
	syms := make([]symbol, n)
	for i := range n {
		syms[i] = symbol{id: t.byteID[piece[i]], prev: int32(i - 1), next: int32(i + 1), size: 1}
	}
	syms[n-1].next = -1
	q := make(queue, 0, n)
	for i := 0; i+1 < n; i++ {
		if m, ok := t.merges[[2]uint32{syms[i].id, syms[i+1].id}]; ok {
			q = append(q, candidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	q.init()
	for len(q) > 0 {
		c := q.pop()
		left := &syms[c.pos]
		if left.size == 0 || left.next < 0 {
			continue // merged away, or the last symbol
		}
		right := &syms[left.next]
		if m, ok := t.merges[[2]uint32{left.id, right.id}]; !ok || m.id != c.id {
			continue // stale: one of the two has changed since
		}
		left.id, left.size = c.id, left.size+right.size
		left.next = right.next
		right.size = 0
		if left.next >= 0 {
			syms[left.next].prev = c.pos
			if m, ok := t.merges[[2]uint32{left.id, syms[left.next].id}]; ok {
				q.push(candidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
		if left.prev >= 0 {
			if m, ok := t.merges[[2]uint32{syms[left.prev].id, left.id}]; ok {
				q.push(candidate{rank: m.rank, pos: left.prev, id: m.id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}
