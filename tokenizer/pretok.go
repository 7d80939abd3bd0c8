package tokenizer

import "unicode"

// The split patterns of the tokenizer.json files this package reads: the
// regexes of GPT-2's ByteLevel pre-tokenizer and of the Split pre-tokenizers
// of Qwen2 and Llama 3. The Hugging Face library runs them with Oniguruma,
// which Go's regexp cannot (they need the lookahead (?!\S)), so each is
// matched here by hand, alternative by alternative, as a backtracking engine
// takes the first alternative that matches at each position.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitter cuts text into pre-tokens by one of the patterns.
type splitter struct {
	gpt2   bool // the GPT-2 pattern; else Qwen2's or Llama 3's
	digits int  // Qwen2: 1, Llama 3: 3 (\p{N}{1,digits}); GPT-2: unbounded
}

func splitterFor(pattern string) (splitter, bool) {
	switch pattern {
	case patternGPT2:
		return splitter{gpt2: true}, true
	case patternQwen2:
		return splitter{digits: 1}, true
	case patternLlama3:
		return splitter{digits: 3}, true
	}
	return splitter{}, false
}

// Character classes of the patterns: \p{L}, \p{N} and \s (Unicode
// White_Space, as Oniguruma's \s on UTF-8 text).
func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// runes is text decoded once, for matching by index.
type runes struct {
	r   []rune
	off []int // byte offset of each rune, and len(text) at the end
}

func decode(s string) runes {
	var rs runes
	for i, r := range s {
		rs.r = append(rs.r, r)
		rs.off = append(rs.off, i)
	}
	rs.off = append(rs.off, len(s))
	return rs
}

// split returns the pre-tokens of s: every match of the pattern in order
// (Split's Isolated behaviour; the patterns match every character, so no text
// falls between matches).
func (sp splitter) split(s string, out []string) []string {
	rs := decode(s)
	for i := 0; i < len(rs.r); {
		j := sp.match(rs.r, i)
		if j <= i { // cannot happen with these patterns; keep the character
			j = i + 1
		}
		out = append(out, s[rs.off[i]:rs.off[j]])
		i = j
	}
	return out
}

// run returns the end of the run of characters from i that satisfy f.
func run(r []rune, i int, f func(rune) bool) int {
	for i < len(r) && f(r[i]) {
		i++
	}
	return i
}

// contraction matches 's 't 're 've 'm 'll 'd at i (case-insensitively
// when fold), returning its end or -1.
func contraction(r []rune, i int, fold bool) int {
	if i >= len(r) || r[i] != '\'' {
		return -1
	}
	low := func(k int) rune {
		if k >= len(r) {
			return 0
		}
		if fold {
			return unicode.ToLower(r[k])
		}
		return r[k]
	}
	switch low(i + 1) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if low(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if low(i+2) == 'l' {
			return i + 3
		}
	}
	return -1
}

func other(c rune) bool { return !isS(c) && !isL(c) && !isN(c) }

// match returns the end of the pattern's match at i.
func (sp splitter) match(r []rune, i int) int {
	n := len(r)
	if j := contraction(r, i, !sp.gpt2); j > 0 {
		return j
	}
	c := r[i]
	if sp.gpt2 {
		//  ?\p{L}+,  ?\p{N}+,  ?[^\s\p{L}\p{N}]+: the optional space first.
		k := i
		if c == ' ' && i+1 < n {
			k = i + 1
		}
		for _, f := range []func(rune) bool{isL, isN, other} {
			if f(r[k]) {
				return run(r, k, f)
			}
		}
	} else {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isL(c) {
			return run(r, i, isL)
		}
		if c != '\r' && c != '\n' && !isN(c) && i+1 < n && isL(r[i+1]) {
			return run(r, i+1, isL)
		}
		// \p{N}{1,digits}
		if isN(c) {
			j := i
			for j < n && j-i < sp.digits && isN(r[j]) {
				j++
			}
			return j
		}
		//  ?[^\s\p{L}\p{N}]+[\r\n]*
		k := i
		if c == ' ' && i+1 < n && other(r[i+1]) {
			k = i + 1
		}
		if other(r[k]) {
			j := run(r, k, other)
			return run(r, j, func(c rune) bool { return c == '\r' || c == '\n' })
		}
		// \s*[\r\n]+: up to the last CR or LF of the whitespace run.
		if isS(c) {
			end := run(r, i, isS)
			for k := end - 1; k >= i; k-- {
				if r[k] == '\r' || r[k] == '\n' {
					return k + 1
				}
			}
		}
	}
	if isS(c) {
		end := run(r, i, isS)
		// \s+(?!\S): the whole run at the end of the text, else all but its
		// last character (which then starts the next match).
		if end == n || end-i >= 2 {
			if end == n {
				return end
			}
			return end - 1
		}
		return end // \s+
	}
	return i + 1
}
