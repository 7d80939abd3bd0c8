package engineworker

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// cat joins byte pieces, so that each piece of a hand-assembled batch can
// carry its comment.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func str(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) } // fixstr

var (
	ts15   = []byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0} // float64 1.5: msgspec writes Python floats as float64
	tokens = []byte{0x94, 0x01, 0x02, 0x03, 0x04}       // [1, 2, 3, 4]: fixarray of positive fixints
	digest = bytes.Repeat([]byte{0xab}, 32)             // a sha256 block hash (ExternalBlockHash bytes)
)

// Batches laid out exactly as msgspec's encoder lays out vLLM's and SGLang's
// structs: array_like structs are arrays of their fields in declaration
// order, tag=True puts the class name first, omit_defaults drops trailing
// fields equal to their default (vllm/distributed/kv_events.py at each
// version; python/sglang/srt/disaggregation/kv_events.py).
func TestDecodeEngineLayouts(t *testing.T) {
	stored := func(layout, medium string, group int, unhashable bool, hash string) Event {
		return Event{Kind: BlockStored, Hashes: []string{hash}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 4,
			Medium: medium, Group: group, Unhashable: unhashable, Layout: layout}
	}
	seven := intKey(7)
	for _, c := range []struct {
		name string
		b    []byte
		want Batch
	}{{
		// vllm-project/vllm@b4e69e0, sgl-project/sglang@006d053: EventBatch(ts, events),
		// BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id).
		name: "v1 array of 6, batch of 2",
		b: cat(
			[]byte{0x92},       // EventBatch: array of 2 (ts, events)
			ts15,               // ts
			[]byte{0x91},       // events: array of 1
			[]byte{0x96},       // BlockStored: array of 6 (tag + 5 fields)
			str("BlockStored"), // tag: the class name
			[]byte{0x91, 0x07}, // block_hashes: [7] (list[int])
			[]byte{0xc0},       // parent_block_hash: None
			tokens,             // token_ids
			[]byte{0x04},       // block_size: 4
			[]byte{0xc0},       // lora_id: None (no default: always written)
		),
		want: Batch{TS: 1.5, Rank: -1, Events: []Event{stored("array-6", "", -1, false, seven)}},
	}, {
		// vLLM 0.9/0.10 (PR #18925 data_parallel_rank, PR #19737 medium; the
		// example at vllm-project/vllm@0ef0f42): hashes as sha256 bytes since 0.10.
		name: "array of 7 with medium, batch with dp rank",
		b: cat(
			[]byte{0x93}, ts15, // EventBatch: [ts, events, data_parallel_rank]
			[]byte{0x92}, // two events
			[]byte{0x97}, str("BlockStored"),
			[]byte{0x91, 0xc4, 0x20}, digest, // block_hashes: [bin 32]
			[]byte{0xc0}, tokens, []byte{0x04}, []byte{0xc0}, // parent, tokens, block_size, lora_id
			str("GPU"),                        // medium
			[]byte{0x93}, str("BlockRemoved"), // BlockRemoved: [tag, block_hashes, medium]
			[]byte{0x91, 0xc4, 0x20}, digest, str("CPU"),
			[]byte{0x01}, // data_parallel_rank: 1
		),
		want: Batch{TS: 1.5, Rank: 1, Events: []Event{
			stored("array-7", "GPU", -1, false, "b"+string(digest)),
			{Kind: BlockRemoved, Hashes: []string{"b" + string(digest)}, Medium: "CPU", Group: -1, Layout: "array-3"},
		}},
	}, {
		// PR #27577 lora_name, PR #33304 extra_keys, PR #37688 group_idx
		// (deepinfra/vllm@99d94b8): 10 elements; kv_cache_spec_* omitted (defaults).
		name: "extended array of 10",
		b: cat(
			[]byte{0x93}, ts15, []byte{0x92},
			[]byte{0x9a}, str("BlockStored"),
			[]byte{0x91, 0xcf, 0xff, 0, 0, 0, 0, 0, 0, 0x07}, // block_hashes: [uint64 above int64]
			[]byte{0x07}, // parent_block_hash: 7
			tokens, []byte{0x04},
			[]byte{0xc0}, str("GPU"), []byte{0xc0}, // lora_id, medium, lora_name
			[]byte{0x91, 0xc0},                    // extra_keys: [None]
			[]byte{0x01},                          // group_idx: 1
			[]byte{0x91}, str("AllBlocksCleared"), // AllBlocksCleared: [tag]
			[]byte{0x00},
		),
		want: Batch{TS: 1.5, Rank: 0, Events: []Event{
			{Kind: BlockStored, Hashes: []string{intKey(0xff00000000000007)}, Parent: seven, Tokens: []uint32{1, 2, 3, 4},
				BlockSize: 4, Medium: "GPU", Group: 1, Layout: "array-10"},
			{Kind: AllBlocksCleared, Group: -1, Layout: "array-1"},
		}},
	}, {
		// vLLM PR #42892: events as tagged maps, the batch still an array
		// (EmbeddedLLM/vllm@8704c8a); a LoRA makes the block unhashable.
		name: "map events",
		b: cat(
			[]byte{0x93}, ts15, []byte{0x91},
			[]byte{0x88}, // map of 8
			str("type"), str("BlockStored"),
			str("block_hashes"), []byte{0x91, 0x07},
			str("parent_block_hash"), []byte{0xc0},
			str("token_ids"), tokens,
			str("block_size"), []byte{0x04},
			str("lora_name"), str("adapter"),
			str("medium"), str("GPU"),
			str("locality"), str("LOCAL"), // a field of a fork: ignored
			[]byte{0x00},
		),
		want: Batch{TS: 1.5, Rank: 0, Events: []Event{stored("map", "GPU", -1, true, seven)}},
	}, {
		// vllm-project/vllm@0181ea3: EventBatch without array_like.
		name: "map batch",
		b: cat(
			[]byte{0x83},
			str("ts"), ts15,
			str("events"), []byte{0x91, 0x81}, str("type"), str("AllBlocksCleared"),
			str("data_parallel_rank"), []byte{0x02},
		),
		want: Batch{TS: 1.5, Rank: 2, Events: []Event{{Kind: AllBlocksCleared, Group: -1, Layout: "map"}}},
	}, {
		// SGLang PR #37271: a metadata map as element 7; a cache salt makes it unhashable.
		name: "sglang metadata",
		b: cat(
			[]byte{0x93}, ts15, []byte{0x91},
			[]byte{0x98}, str("BlockStored"), []byte{0x91, 0x07}, []byte{0xc0}, tokens, []byte{0x04}, []byte{0xc0}, str("GPU"),
			[]byte{0x81}, str("cache_salt"), str("tenant-a"),
			[]byte{0xc0}, // data_parallel_rank: None
		),
		want: Batch{TS: 1.5, Rank: -1, Events: []Event{stored("sglang-array-8", "GPU", -1, true, seven)}},
	}} {
		got, err := DecodeBatch(c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

// A layout no source has ever had is refused with an error that names it.
func TestDecodeRefusesUnknownLayouts(t *testing.T) {
	thirteen := cat([]byte{0x92}, ts15, []byte{0x91, 0x9d}, str("BlockStored"), []byte{0x91, 0x07, 0xc0}, tokens,
		[]byte{0x04}, bytes.Repeat([]byte{0xc0}, 8))
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{thirteen, "BlockStored as an array of 13 elements"},
		{cat([]byte{0x92}, ts15, []byte{0x91, 0x91}, str("BlockMoved")), `event tag "BlockMoved"`},
		{cat([]byte{0x92}, ts15, []byte{0x91, 0x81}, str("kind"), str("x")), `event map without a string "type"`},
		{cat([]byte{0x94}, ts15, []byte{0x90, 0xc0, 0xc0}), "batch as an array of 4 elements"},
		{[]byte{0x07}, "batch as an integer"},
		{cat([]byte{0x92}, ts15, []byte{0x91, 0x81}, str("type"), str("BlockStored")), `BlockStored map without "block_hashes"`},
	} {
		_, err := DecodeBatch(c.b)
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want ErrLayout naming %q", err, c.want)
		}
	}
}
