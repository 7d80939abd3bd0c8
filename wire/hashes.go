package wire

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
)

// FNV-1a 64-bit parameters (the same as hash/fnv's New64a).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// ChainHashes appends to dst the chained hashes of the full blocks of tokens,
// blockSize tokens each (a trailing partial block is not hashed), and returns
// it. Block i's hash is FNV-1a 64 over the 8 bytes of block i-1's hash
// (little-endian; 0 for block 0) followed by each token id of block i as 4
// bytes little-endian (docs/protocol.md, Block hashes). It allocates only when
// dst is too short. It panics if blockSize < 1.
func ChainHashes(dst []uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize < 1 {
		panic("wire: block size must be at least 1")
	}
	var prev uint64
	for len(tokens) >= blockSize {
		h := uint64(fnvOffset)
		for i := range 8 {
			h ^= (prev >> (8 * i)) & 0xff
			h *= fnvPrime
		}
		for _, tok := range tokens[:blockSize] {
			for i := range 4 {
				h ^= uint64(tok>>(8*i)) & 0xff
				h *= fnvPrime
			}
		}
		dst = append(dst, h)
		prev = h
		tokens = tokens[blockSize:]
	}
	return dst
}

// EncodeHashes returns the wire form of a hash list: base64url without
// padding of the hashes as little-endian uint64, 8 bytes each.
func EncodeHashes(hashes []uint64) string {
	b := make([]byte, 8*len(hashes))
	for i, h := range hashes {
		binary.LittleEndian.PutUint64(b[8*i:], h)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// MaxHashes bounds the hashes of one list: a request's Dispatch-Block-Hashes,
// and each tier's list of a KV cache event's stored or removed.
const MaxHashes = 8192

// Errors of DecodeHashes.
var (
	errHashChars  = errors.New("is not base64url without padding")
	errHashLength = errors.New("is not a whole number of 8-byte hashes")
	errHashEmpty  = errors.New("is empty")
	errHashCount  = errors.New("has more than " + strconv.Itoa(MaxHashes) + " hashes")
)

// encodedLen returns the length of n hashes in the wire form.
func encodedLen(n int) int { return base64.RawURLEncoding.EncodedLen(8 * n) }

// DecodeHashes decodes the wire form of a hash list (see EncodeHashes),
// appending to dst. It is strict: only the base64url alphabet, no padding, no
// whitespace or line breaks, unused trailing bits zero, a whole number of
// 8-byte hashes, at least 1 and at most MaxHashes; the length is checked
// before anything is decoded or allocated. The error says what is wrong and
// reads after the value, e.g. `"abc" is not base64url without padding`.
func DecodeHashes(dst []uint64, s string) ([]uint64, error) {
	if s == "" {
		return dst, errHashEmpty
	}
	if len(s) > encodedLen(MaxHashes) {
		return dst, errHashCount
	}
	n := len(s) * 6 / 8 / 8 // whole hashes that fit the characters
	if n == 0 || encodedLen(n) != len(s) {
		return dst, errHashLength
	}
	for i := 0; i < len(s); i++ {
		if !urlChars[s[i]] {
			return dst, errHashChars
		}
	}
	if cap(dst)-len(dst) < n {
		d := make([]uint64, len(dst), len(dst)+n)
		copy(d, dst)
		dst = d
	}
	// 32 characters are 24 bytes, 3 hashes: decode chunk by chunk on the stack.
	var buf [24]byte
	enc := base64.RawURLEncoding.Strict()
	for len(s) > 0 {
		c := s[:min(32, len(s))]
		k, err := enc.Decode(buf[:], []byte(c))
		if err != nil || k%8 != 0 {
			return dst, errHashChars
		}
		for j := 0; j < k; j += 8 {
			dst = append(dst, binary.LittleEndian.Uint64(buf[j:]))
		}
		s = s[len(c):]
	}
	return dst, nil
}

var urlChars = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") {
		t[c] = true
	}
	return t
}()
