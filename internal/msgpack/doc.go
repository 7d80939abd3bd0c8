// Package msgpack is a small MessagePack codec (https://github.com/msgpack/msgpack/blob/master/spec.md)
// for the engine worker and the fake engine: a decoder into a tree of plain Go
// values and an encoder that writes the shortest form of each value, as
// Python's msgspec encoder does (msgspec/_core.c, mpack_encode_*), so that the
// fake engine's batches are laid out byte for byte as vLLM's.
//
// Only what KV event batches use is supported: nil, booleans, integers,
// float32/64, str, bin, arrays and maps. Extension types are refused.
//
// # Decoding
//
// [Decode] returns nil, bool, int64 (every integer that fits it; unsigned
// values above it as uint64), float64, string, []byte, []any or [Map]. It is
// strict and bounded: every length is checked against the bytes left before
// anything is allocated, nesting is limited to [MaxDepth], and trailing
// bytes are an error. Cost: O(len(b)).
//
// # Concurrency
//
// The functions are safe for concurrent use; an [Encoder] is not.
package msgpack
