package msgpack

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var e Encoder
	e.Array(9)
	e.Nil()
	e.Bool(true)
	e.Int(-5)
	e.Int(-200)
	e.Uint(300)
	e.Uint(math.MaxUint64)
	e.Float64(1.5)
	e.Str("BlockStored")
	e.Map(1)
	e.Str("k")
	e.Bin([]byte{1, 2})
	got, err := Decode(e.B)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{nil, true, int64(-5), int64(-200), int64(300), uint64(math.MaxUint64), 1.5, "BlockStored",
		Map{{"k", []byte{1, 2}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

// The shortest forms, byte for byte (the MessagePack spec's examples).
func TestEncodeShortest(t *testing.T) {
	for _, c := range []struct {
		f    func(*Encoder)
		want []byte
	}{
		{func(e *Encoder) { e.Uint(127) }, []byte{0x7f}},
		{func(e *Encoder) { e.Uint(128) }, []byte{0xcc, 0x80}},
		{func(e *Encoder) { e.Uint(65536) }, []byte{0xce, 0, 1, 0, 0}},
		{func(e *Encoder) { e.Int(-32) }, []byte{0xe0}},
		{func(e *Encoder) { e.Int(-33) }, []byte{0xd0, 0xdf}},
		{func(e *Encoder) { e.Array(16) }, []byte{0xdc, 0, 16}},
		{func(e *Encoder) { e.Str("") }, []byte{0xa0}},
		{func(e *Encoder) { e.Array(15) }, []byte{0x9f}},
		{func(e *Encoder) { e.Map(15) }, []byte{0x8f}},
		{func(e *Encoder) { e.Map(16) }, []byte{0xde, 0, 16}},
		{func(e *Encoder) { e.Map(1 << 16) }, []byte{0xdf, 0, 1, 0, 0}},
		{func(e *Encoder) { e.Str(strings.Repeat("a", 31)) }, append([]byte{0xbf}, strings.Repeat("a", 31)...)},
		{func(e *Encoder) { e.Str(strings.Repeat("a", 32)) }, append([]byte{0xd9, 32}, strings.Repeat("a", 32)...)},
		{func(e *Encoder) { e.Str(strings.Repeat("a", 256)) }, append([]byte{0xda, 1, 0}, strings.Repeat("a", 256)...)},
		{func(e *Encoder) { e.Bin(nil) }, []byte{0xc4, 0}},
		{func(e *Encoder) { e.Bin(make([]byte, 256)) }, append([]byte{0xc5, 1, 0}, make([]byte, 256)...)},
		{func(e *Encoder) { e.Bin(make([]byte, 1<<16)) }, append([]byte{0xc6, 0, 1, 0, 0}, make([]byte, 1<<16)...)},
	} {
		var e Encoder
		c.f(&e)
		if !bytes.Equal(e.B, c.want) {
			t.Errorf("got % x, want % x", e.B, c.want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, b := range map[string][]byte{
		"short array":   {0x92, 0x01},
		"huge array":    {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge str":      {0xdb, 0xff, 0xff, 0xff, 0xff},
		"trailing":      {0x01, 0x02},
		"ext":           {0xd4, 0x01, 0x01},
		"empty":         {},
		"short float64": {0xcb, 0, 0},
	} {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	deep := bytes.Repeat([]byte{0x91}, MaxDepth+2)
	if _, err := Decode(append(deep, 0xc0)); err == nil {
		t.Error("too deep: decoded")
	}
	if _, err := Decode([]byte{0x92, 0x01}); !errors.Is(err, ErrShort) {
		t.Errorf("short: got %v, want ErrShort", err)
	}
}
