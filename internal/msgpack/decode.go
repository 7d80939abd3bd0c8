package msgpack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// MaxDepth bounds the nesting of arrays and maps that Decode accepts.
const MaxDepth = 32

// Map is a decoded map, its pairs in wire order.
type Map []Pair

// Pair is one key and value of a [Map].
type Pair struct {
	Key, Value any
}

// Get returns the value under the string key k and whether it is present.
// Cost: O(len(m)).
func (m Map) Get(k string) (any, bool) {
	for _, p := range m {
		if s, ok := p.Key.(string); ok && s == k {
			return p.Value, true
		}
	}
	return nil, false
}

// ErrShort is wrapped by Decode's error when the input ends inside a value.
var ErrShort = errors.New("msgpack: unexpected end of input")

// Decode decodes exactly one value from b.
func Decode(b []byte) (any, error) {
	d := decoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.i != len(b) {
		return nil, fmt.Errorf("msgpack: %d trailing bytes after the value", len(b)-d.i)
	}
	return v, nil
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) need(n int) ([]byte, error) {
	if n < 0 || len(d.b)-d.i < n {
		return nil, fmt.Errorf("%w at offset %d (want %d bytes)", ErrShort, d.i, n)
	}
	s := d.b[d.i : d.i+n]
	d.i += n
	return s, nil
}

func (d *decoder) uint(n int) (uint64, error) {
	s, err := d.need(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	default:
		return binary.BigEndian.Uint64(s), nil
	}
}

// length reads an n-byte length and checks that at least min(length, 1)*unit
// bytes could follow, so a hostile length allocates nothing.
func (d *decoder) length(n, unit int) (int, error) {
	l, err := d.uint(n)
	if err != nil {
		return 0, err
	}
	if l > uint64(len(d.b)-d.i)/uint64(unit) {
		return 0, fmt.Errorf("%w at offset %d (length %d)", ErrShort, d.i, l)
	}
	return int(l), nil
}

func (d *decoder) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("msgpack: nested deeper than %d", MaxDepth)
	}
	s, err := d.need(1)
	if err != nil {
		return nil, err
	}
	c := s[0]
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xa0 && c <= 0xbf:
		return d.str(int(c & 0x1f))
	case c >= 0x90 && c <= 0x9f:
		return d.array(int(c&0x0f), depth)
	case c >= 0x80 && c <= 0x8f:
		return d.mapv(int(c&0x0f), depth)
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := d.length(1<<(c-0xc4), 1)
		if err != nil {
			return nil, err
		}
		s, _ := d.need(n)
		return append([]byte(nil), s...), nil
	case 0xca:
		u, err := d.uint(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		u, err := d.uint(8)
		return math.Float64frombits(u), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := d.uint(1 << (c - 0xcc))
		if err != nil {
			return nil, err
		}
		if u > math.MaxInt64 {
			return u, nil
		}
		return int64(u), nil
	case 0xd0:
		u, err := d.uint(1)
		return int64(int8(u)), err
	case 0xd1:
		u, err := d.uint(2)
		return int64(int16(u)), err
	case 0xd2:
		u, err := d.uint(4)
		return int64(int32(u)), err
	case 0xd3:
		u, err := d.uint(8)
		return int64(u), err
	case 0xd9, 0xda, 0xdb:
		n, err := d.length(1<<(c-0xd9), 1)
		if err != nil {
			return nil, err
		}
		return d.str(n)
	case 0xdc, 0xdd:
		n, err := d.length(2<<(c-0xdc), 1)
		if err != nil {
			return nil, err
		}
		return d.array(n, depth)
	case 0xde, 0xdf:
		n, err := d.length(2<<(c-0xde), 2)
		if err != nil {
			return nil, err
		}
		return d.mapv(n, depth)
	}
	return nil, fmt.Errorf("msgpack: unsupported type byte 0x%02x at offset %d", c, d.i-1)
}

func (d *decoder) str(n int) (any, error) {
	s, err := d.need(n)
	if err != nil {
		return nil, err
	}
	return string(s), nil
}

func (d *decoder) array(n, depth int) (any, error) {
	if n > len(d.b)-d.i {
		return nil, fmt.Errorf("%w at offset %d (array of %d)", ErrShort, d.i, n)
	}
	a := make([]any, n)
	for k := range a {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a[k] = v
	}
	return a, nil
}

func (d *decoder) mapv(n, depth int) (any, error) {
	if 2*n > len(d.b)-d.i {
		return nil, fmt.Errorf("%w at offset %d (map of %d)", ErrShort, d.i, n)
	}
	m := make(Map, n)
	for k := range m {
		key, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = Pair{key, v}
	}
	return m, nil
}
