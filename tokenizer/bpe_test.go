package tokenizer

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// naiveMerge is the definition the heap in merge implements, as this package
// first had it: rescan every adjacent pair, merge the lowest rank (the
// leftmost of equals), until no pair merges. Quadratic, and the oracle of
// TestMergeIsTheDefinition.
func (t *Tokenizer) naiveMerge(piece string) []uint32 {
	syms := make([]uint32, 0, len(piece))
	for i := 0; i < len(piece); i++ {
		syms = append(syms, t.byteID[piece[i]])
	}
	for len(syms) > 1 {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := t.merges[[2]uint32{syms[i], syms[i+1]}]; ok && (at < 0 || m.rank < best.rank) {
				best, at = m, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] = best.id
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	return syms
}

// naiveNextAdded is the definition of nextAdded: the leftmost occurrence of
// any added content, the longest at that offset.
func (t *Tokenizer) naiveNextAdded(s string) (int, *addedToken) {
	var best *addedToken
	bestAt := len(s)
	for i := range t.added {
		a := &t.added[i]
		if a.content == "" {
			continue
		}
		if at := strings.Index(s, a.content); at >= 0 && (at < bestAt || at == bestAt && len(a.content) > len(best.content)) {
			best, bestAt = a, at
		}
	}
	return bestAt, best
}

// TestMergeIsTheDefinition: on any text made of the test vocabulary's
// fragments (so that many merges apply, and runs of one character), the heap
// merges exactly as the quadratic definition does.
func TestMergeIsTheDefinition(t *testing.T) {
	tok, _ := load(t)
	frags := []string{" ", "  ", "e", "th", " the", "ing", "a", "aa", "\n", "'s", "12", "é", "!", "tenant", " fair"}
	rapid.Check(t, func(rt *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom(frags), 1, 40).Draw(rt, "parts")
		piece := strings.Join(parts, "")
		got := tok.merge(piece, nil)
		if want := tok.naiveMerge(piece); fmt.Sprint(got) != fmt.Sprint(want) {
			rt.Fatalf("merge(%q) = %v, want %v", piece, got, want)
		}
	})
}

// TestNextAddedIsTheDefinition: with added tokens that share prefixes and
// contain one another, nextAdded finds what the definition finds.
func TestNextAddedIsTheDefinition(t *testing.T) {
	tok := &Tokenizer{added: []addedToken{{"<|a|>", 1}, {"<|a", 2}, {"<|ab|>", 3}, {"|>", 4}, {"<", 5}, {"<|a|>x", 6}}}
	tok.addedFirst = newTrie(tok.added)
	rapid.Check(t, func(rt *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"<", "|", "a", "b", ">", "x", " "}), 0, 30).Draw(rt, "parts")
		s := strings.Join(parts, "")
		at, got := tok.nextAdded(s)
		wantAt, want := tok.naiveNextAdded(s)
		if at != wantAt || (got == nil) != (want == nil) || got != nil && got.content != want.content {
			rt.Fatalf("nextAdded(%q) = %d %v, want %d %v", s, at, got, wantAt, want)
		}
	})
}

// BenchmarkEncodeLongPiece: one pre-token of n spaces (a run of whitespace
// is one piece), and n bytes of an added token repeated: each was quadratic
// in n before the heap and the trie (32 KB of spaces: 11 s).
func BenchmarkEncodeLongPiece(b *testing.B) {
	tok, _ := load(b)
	for _, n := range []int{4 << 10, 32 << 10, 256 << 10} {
		spaces := strings.Repeat(" ", n) + "x"
		b.Run(fmt.Sprintf("spaces=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(spaces)))
			for b.Loop() {
				tok.Encode(spaces, false)
			}
		})
		added := strings.Repeat("<|im_end|>x", n/11)
		b.Run(fmt.Sprintf("added=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(added)))
			for b.Loop() {
				tok.Encode(added, false)
			}
		})
	}
}

// TestCacheHoldsNoRequestText: the cache keeps copies of short pieces, never
// a substring of the text encoded (which would keep the whole request alive)
// nor a piece over maxCachedLen.
func TestCacheHoldsNoRequestText(t *testing.T) {
	tok, _ := load(t)
	text := strings.Repeat("x", 10_000) + " zqwvk " + strings.Repeat(" ", 1000) + "tail"
	tok.Encode(text, false)
	lo := uintptr(unsafe.Pointer(unsafe.StringData(text)))
	hi := lo + uintptr(len(text))
	n := 0
	tok.cache.Range(func(k, _ any) bool {
		key := k.(string)
		n++
		if p := uintptr(unsafe.Pointer(unsafe.StringData(key))); p >= lo && p < hi {
			t.Errorf("cached piece %.20q shares the encoded text's memory", key)
		}
		if len(key) > maxCachedLen {
			t.Errorf("cached a piece of %d bytes, over %d", len(key), maxCachedLen)
		}
		return true
	})
	if n == 0 {
		t.Fatal("nothing cached")
	}
}
