package tokenizer

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

// bpe appends the ids of one pre-token: its bytes as ByteLevel characters,
// merged pair by pair, always the adjacent pair of the lowest merge rank
// (the leftmost of equals), as the Hugging Face library's BPE does.
func (t *Tokenizer) bpe(piece string, ids []uint32) []uint32 {
	if v, ok := t.cache.Load(piece); ok {
		return append(ids, v.([]uint32)...)
	}
	start := len(ids)
	ids = t.merge(piece, ids)
	if t.cached.Add(1) <= maxCached {
		t.cache.Store(piece, append([]uint32(nil), ids[start:]...))
	}
	return ids
}

// maxCached bounds the pre-tokens whose ids are kept (as the Hugging Face
// library keeps a cache of words): the first ones seen, a few MB at most.
const maxCached = 100_000

func (t *Tokenizer) merge(piece string, ids []uint32) []uint32 {
	syms := make([]string, 0, len(piece))
	for i := 0; i < len(piece); i++ {
		syms = append(syms, string(byteChar[piece[i]]))
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] += syms[at+1]
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	for _, s := range syms {
		ids = append(ids, t.vocab[s]) // every merge result and byte is in the vocabulary (Parse checks the bytes)
	}
	return ids
}
