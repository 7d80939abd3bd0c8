package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"fairdispatch/wire"
)

// DefaultBlockSize is the KV block size of a prefix workload, in tokens.
const DefaultBlockSize = 16

// Prefixes describes a workload of shared prompt prefixes (Config.Prefixes):
// each request's prompt is one of N prefixes, drawn with Zipf exponent Zipf
// (prefix k, from 1, has weight 1/k^Zipf), followed by SuffixBlocks blocks of
// its own. Prefix k is MinBlocks to MaxBlocks blocks long (uniform, drawn once
// per run). Token ids are pseudo-random and deterministic in Config.Seed, so
// two runs with one seed send the same prompts. Each request carries
// Dispatch-Block-Hashes, the chained hashes of its full blocks
// (wire.ChainHashes, docs/protocol.md, Block hashes), and
// Dispatch-ISL-Tokens = its blocks x BlockSize, replacing Config.ISL.
type Prefixes struct {
	// N is the number of shared prefixes; 0 turns the workload off.
	N int
	// Zipf is the exponent of the prefixes' popularity, >= 0 (0: uniform).
	Zipf float64
	// MinBlocks and MaxBlocks bound a prefix's length in blocks, 1 <= MinBlocks <= MaxBlocks.
	MinBlocks, MaxBlocks int
	// SuffixBlocks is the blocks of each request's own after its prefix, >= 0.
	SuffixBlocks int
	// BlockSize is the tokens per block, default 16 (the engines' and the
	// dispatcher's --block-size).
	BlockSize int
}

// ParseBlockRange parses "MIN:MAX" (or "N" for MIN = MAX = N).
func ParseBlockRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("loadgen: block range %q: want MIN:MAX with 1 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}

func (p *Prefixes) withDefaults() error {
	if p.N == 0 {
		return nil
	}
	if p.BlockSize == 0 {
		p.BlockSize = DefaultBlockSize
	}
	switch {
	case p.N < 0 || p.N > 1_000_000:
		return fmt.Errorf("prefixes %d: want 0 to 1000000", p.N)
	case p.Zipf < 0 || math.IsNaN(p.Zipf) || math.IsInf(p.Zipf, 0):
		return fmt.Errorf("zipf %v: want >= 0", p.Zipf)
	case p.MinBlocks < 1 || p.MaxBlocks < p.MinBlocks || p.MaxBlocks+p.SuffixBlocks > wire.MaxHashes:
		return fmt.Errorf("prefix blocks %d:%d, suffix %d: want 1 <= min <= max, max+suffix <= %d", p.MinBlocks, p.MaxBlocks, p.SuffixBlocks, wire.MaxHashes)
	case p.SuffixBlocks < 0 || p.BlockSize < 1:
		return fmt.Errorf("suffix blocks %d, block size %d: want >= 0 and >= 1", p.SuffixBlocks, p.BlockSize)
	}
	return nil
}

// prefixGen draws the prompts of a prefix workload.
type prefixGen struct {
	p       Prefixes
	seed    uint64
	lengths []int     // blocks of each prefix
	cdf     []float64 // cumulative Zipf weights
	rng     *rand.Rand
	tokens  []uint32 // scratch
}

func newPrefixGen(p Prefixes, seed uint64) *prefixGen {
	g := &prefixGen{p: p, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
	sum := 0.0
	for k := range p.N {
		g.lengths = append(g.lengths, p.MinBlocks+g.rng.IntN(p.MaxBlocks-p.MinBlocks+1))
		sum += 1 / math.Pow(float64(k+1), p.Zipf)
		g.cdf = append(g.cdf, sum)
	}
	return g
}

// mix is SplitMix64's finaliser: a token id from a few numbers.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// next returns the block hashes of request n's prompt and its prefix.
func (g *prefixGen) next(n int) (hashes []uint64, prefix int) {
	u := g.rng.Float64() * g.cdf[len(g.cdf)-1]
	k := 0
	for k < len(g.cdf)-1 && g.cdf[k] < u {
		k++
	}
	bs := g.p.BlockSize
	g.tokens = g.tokens[:0]
	for i := range g.lengths[k] * bs {
		g.tokens = append(g.tokens, uint32(mix(g.seed^mix(uint64(k)<<32|uint64(i)))))
	}
	for i := range g.p.SuffixBlocks * bs {
		g.tokens = append(g.tokens, uint32(mix(^g.seed^mix(uint64(n)<<32|uint64(i)))))
	}
	return wire.ChainHashes(nil, g.tokens, bs), k
}
