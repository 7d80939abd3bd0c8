package msgpack

import (
	"encoding/binary"
	"math"
)

// Encoder appends MessagePack to a byte slice, each value in its shortest
// form (msgspec's choice, msgspec/_core.c). The zero value is ready to use.
type Encoder struct {
	B []byte
}

// Nil appends nil.
func (e *Encoder) Nil() { e.B = append(e.B, 0xc0) }

// Bool appends a boolean.
func (e *Encoder) Bool(v bool) {
	if v {
		e.B = append(e.B, 0xc3)
	} else {
		e.B = append(e.B, 0xc2)
	}
}

// Int appends a signed integer: non-negative ones as Uint does, as msgspec
// encodes every Python int >= 0.
func (e *Encoder) Int(v int64) {
	switch {
	case v >= 0:
		e.Uint(uint64(v))
	case v >= -32:
		e.B = append(e.B, byte(int8(v)))
	case v >= math.MinInt8:
		e.B = append(e.B, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xd2), uint32(int32(v)))
	default:
		e.B = binary.BigEndian.AppendUint64(append(e.B, 0xd3), uint64(v))
	}
}

// Uint appends an unsigned integer.
func (e *Encoder) Uint(v uint64) {
	switch {
	case v <= 0x7f:
		e.B = append(e.B, byte(v))
	case v <= math.MaxUint8:
		e.B = append(e.B, 0xcc, byte(v))
	case v <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xce), uint32(v))
	default:
		e.B = binary.BigEndian.AppendUint64(append(e.B, 0xcf), v)
	}
}

// Float64 appends a float64 (msgspec always writes Python floats as float64).
func (e *Encoder) Float64(v float64) {
	e.B = binary.BigEndian.AppendUint64(append(e.B, 0xcb), math.Float64bits(v))
}

// Str appends a string.
func (e *Encoder) Str(s string) {
	e.length(len(s), 31, 0xa0, 0xd9, 0xda, 0xdb)
	e.B = append(e.B, s...)
}

// Bin appends a byte string.
func (e *Encoder) Bin(b []byte) {
	e.length(len(b), -1, 0, 0xc4, 0xc5, 0xc6)
	e.B = append(e.B, b...)
}

// Array appends the header of an array of n values; the caller appends them.
func (e *Encoder) Array(n int) { e.length(n, 15, 0x90, 0, 0xdc, 0xdd) }

// Map appends the header of a map of n pairs; the caller appends key, value, ...
func (e *Encoder) Map(n int) { e.length(n, 15, 0x80, 0, 0xde, 0xdf) }

// length appends the header of a string, byte string, array or map of n
// bytes or elements, in the shortest form its family has: the fix form
// (fix|n) up to fixMax (-1: none), then the 8-bit (c8; 0: none), 16-bit and
// 32-bit forms.
func (e *Encoder) length(n, fixMax int, fix, c8, c16, c32 byte) {
	switch {
	case n <= fixMax:
		e.B = append(e.B, fix|byte(n))
	case c8 != 0 && n <= math.MaxUint8:
		e.B = append(e.B, c8, byte(n))
	case n <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, c16), uint16(n))
	default:
		e.B = binary.BigEndian.AppendUint32(append(e.B, c32), uint32(n))
	}
}
