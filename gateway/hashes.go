package gateway

import (
	"encoding/base64"
	"encoding/binary"
)

// maxHashes is the most hashes Dispatch-Block-Hashes carries (docs/protocol.md,
// Request headers).
const maxHashes = 8192

// chainHashes returns the chained block hashes of the full blocks of tokens
// (docs/protocol.md, Block hashes): FNV-1a 64 over the previous hash (8 bytes
// little-endian, zero for block 0) and the block's token ids (4 bytes
// little-endian each). At most maxHashes. The engine worker computes the
// same from the engine's KV events.
func chainHashes(tokens []uint32, blockSize int) []uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	n := min(len(tokens)/blockSize, maxHashes)
	out := make([]uint64, n)
	var prev uint64
	var buf [8]byte
	for i := range n {
		h := uint64(offset)
		binary.LittleEndian.PutUint64(buf[:], prev)
		for _, b := range buf {
			h = (h ^ uint64(b)) * prime
		}
		for _, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[:4], t)
			for _, b := range buf[:4] {
				h = (h ^ uint64(b)) * prime
			}
		}
		out[i] = h
		prev = h
	}
	return out
}

// encodeHashes is the header form: base64url without padding of the hashes
// as 8-byte little-endian integers.
func encodeHashes(hs []uint64) string {
	raw := make([]byte, 8*len(hs))
	for i, h := range hs {
		binary.LittleEndian.PutUint64(raw[8*i:], h)
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}
