package wire_test

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"fairdispatch/wire"
)

// TestChainHashesVector is the test vector of docs/protocol.md, Block hashes:
// tokens 1..10 in blocks of 4 give two hashes (the partial block 9, 10 is not
// hashed), and their header value.
func TestChainHashesVector(t *testing.T) {
	got := wire.ChainHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 4)
	want := []uint64{0x7e75ba253efd3fc1, 0x6cdb6eff59291782}
	if !slices.Equal(got, want) {
		t.Fatalf("got %#x, want %#x", got, want)
	}
	if got, want := wire.EncodeHashes(got), "wT_9PiW6dX6CFylZ_27bbA"; got != want {
		t.Fatalf("header value: got %q, want %q", got, want)
	}
}

// TestChainHashesFNV checks the hash against the standard library's FNV-1a
// 64 over the bytes docs/protocol.md, Block hashes lists.
func TestChainHashesFNV(t *testing.T) {
	tokens := make([]uint32, 100)
	for i := range tokens {
		tokens[i] = uint32(i*2654435761) ^ 0xdeadbeef
	}
	for _, bs := range []int{1, 3, 16, 100, 101} {
		got := wire.ChainHashes(nil, tokens, bs)
		var want []uint64
		var prev uint64
		for i := 0; i+bs <= len(tokens); i += bs {
			f := fnv.New64a()
			f.Write(binary.LittleEndian.AppendUint64(nil, prev))
			for _, tok := range tokens[i : i+bs] {
				f.Write(binary.LittleEndian.AppendUint32(nil, tok))
			}
			prev = f.Sum64()
			want = append(want, prev)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("block size %d: got %x, want %x", bs, got, want)
		}
	}
}

func TestDecodeHashesRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 100, wire.MaxHashes} {
		in := make([]uint64, n)
		for i := range in {
			in[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
		}
		got, err := wire.DecodeHashes(nil, wire.EncodeHashes(in))
		if err != nil || !slices.Equal(got, in) {
			t.Fatalf("%d hashes: got %d, %v", n, len(got), err)
		}
	}
}

func TestDecodeHashesStrict(t *testing.T) {
	one := wire.EncodeHashes([]uint64{42}) // 11 characters
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "is empty"},
		{"padding", one + "=", "is not a whole number"},
		{"standard alphabet", strings.Replace(wire.EncodeHashes([]uint64{^uint64(0)}), "_", "/", 1), "is not base64url"},
		{"line break", one[:5] + "\n" + one[5:], "is not a whole number"},
		{"inner space", one[:4] + " " + one[5:], "is not base64url"},
		{"short", one[:10], "is not a whole number"},
		{"long", one + "A", "is not a whole number"},
		{"trailing bits", one[:10] + "B", "is not base64url"},
		{"too many", strings.Repeat("A", 87392), "has more than 8192 hashes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := wire.DecodeHashes(nil, c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, %v; want an error containing %q", got, err, c.want)
			}
		})
	}
}

func TestDecodeHashesAllocs(t *testing.T) {
	s := wire.EncodeHashes(make([]uint64, 512))
	dst := make([]uint64, 0, 512)
	if n := testing.AllocsPerRun(100, func() { dst, _ = wire.DecodeHashes(dst[:0], s) }); n != 0 {
		t.Fatalf("got %v allocations, want 0", n)
	}
}
