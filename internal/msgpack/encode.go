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
	n := len(s)
	switch {
	case n <= 31:
		e.B = append(e.B, 0xa0|byte(n))
	case n <= math.MaxUint8:
		e.B = append(e.B, 0xd9, byte(n))
	case n <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xda), uint16(n))
	default:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xdb), uint32(n))
	}
	e.B = append(e.B, s...)
}

// Bin appends a byte string.
func (e *Encoder) Bin(b []byte) {
	n := len(b)
	switch {
	case n <= math.MaxUint8:
		e.B = append(e.B, 0xc4, byte(n))
	case n <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xc5), uint16(n))
	default:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xc6), uint32(n))
	}
	e.B = append(e.B, b...)
}

// Array appends the header of an array of n values; the caller appends them.
func (e *Encoder) Array(n int) {
	switch {
	case n <= 15:
		e.B = append(e.B, 0x90|byte(n))
	case n <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xdc), uint16(n))
	default:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xdd), uint32(n))
	}
}

// Map appends the header of a map of n pairs; the caller appends key, value, ...
func (e *Encoder) Map(n int) {
	switch {
	case n <= 15:
		e.B = append(e.B, 0x80|byte(n))
	case n <= math.MaxUint16:
		e.B = binary.BigEndian.AppendUint16(append(e.B, 0xde), uint16(n))
	default:
		e.B = binary.BigEndian.AppendUint32(append(e.B, 0xdf), uint32(n))
	}
}
