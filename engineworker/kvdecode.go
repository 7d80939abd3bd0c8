package engineworker

// The decoding of the engines' KV event batches, every layout their sources
// have shipped (the facts and commits are in docs/deployment.md, In front of
// vLLM). It follows vllm/distributed/kv_events.py (EventBatch, KVEventBatch,
// BlockStored, BlockRemoved, AllBlocksCleared: msgspec structs, array_like
// until vLLM PR #42892, tagged) and SGLang's
// python/sglang/srt/disaggregation/kv_events.py (the same structs).

import (
	"errors"
	"fmt"
	"math"

	"fairdispatch/internal/msgpack"
)

// ErrLayout is wrapped by every error about a batch or event laid out in a
// way no vLLM or SGLang version lays it out; the message names what was seen.
var ErrLayout = errors.New("kv events: unknown layout")

// Kind is the kind of an engine KV event.
type Kind uint8

// The kinds of engine KV events.
const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// Batch is one decoded engine batch (vLLM's KVEventBatch).
type Batch struct {
	// TS is the engine's timestamp, seconds since the epoch.
	TS float64
	// Rank is data_parallel_rank, -1 when the batch has none (SGLang, vLLM
	// before PR #18925).
	Rank int
	// Events are the batch's events in order.
	Events []Event
}

// Event is one decoded engine KV event, whatever its layout.
type Event struct {
	Kind Kind
	// Hashes are the engine's block hashes as map keys (see engineHash).
	Hashes []string
	// Parent is the engine hash of the block before Hashes[0]; "" for a
	// chain that starts at the prompt's first block.
	Parent string
	// Tokens are the token ids of the stored blocks, BlockSize per block.
	Tokens []uint32
	// BlockSize is the engine's block size in tokens (BlockStored).
	BlockSize int
	// Medium is the engine's medium ("GPU", "CPU", ...), "" when absent.
	Medium string
	// Unhashable is set when the blocks' content depends on more than their
	// token ids: a LoRA adapter, extra keys (multimodal hashes, cache salt,
	// prompt embeddings) or SGLang's cache_salt metadata.
	Unhashable bool
	// Group is group_idx, the KV cache group; -1 when absent.
	Group int
	// Layout names the layout the event came in, for logs and metrics.
	Layout string
}

// DecodeBatch decodes one ZMQ payload (the third frame of a message).
func DecodeBatch(payload []byte) (Batch, error) {
	v, err := msgpack.Decode(payload)
	if err != nil {
		return Batch{}, fmt.Errorf("kv events: %w", err)
	}
	b := Batch{Rank: -1}
	var events any
	switch t := v.(type) {
	case []any: // EventBatch array_like: [ts, events] or [ts, events, dp_rank]
		if len(t) < 2 || len(t) > 3 {
			return Batch{}, fmt.Errorf("%w: batch as an array of %d elements (want 2 or 3)", ErrLayout, len(t))
		}
		events = t[1]
		if b.TS, err = asFloat(t[0], "batch ts"); err != nil {
			return Batch{}, err
		}
		if len(t) == 3 && t[2] != nil {
			if b.Rank, err = asInt(t[2], "batch data_parallel_rank"); err != nil {
				return Batch{}, err
			}
		}
	case msgpack.Map: // EventBatch without array_like (vllm-project/vllm@0181ea3)
		var ok bool
		if events, ok = t.Get("events"); !ok {
			return Batch{}, fmt.Errorf("%w: batch as a map without \"events\"", ErrLayout)
		}
		if ts, ok := t.Get("ts"); ok {
			if b.TS, err = asFloat(ts, "batch ts"); err != nil {
				return Batch{}, err
			}
		}
		if r, ok := t.Get("data_parallel_rank"); ok && r != nil {
			if b.Rank, err = asInt(r, "batch data_parallel_rank"); err != nil {
				return Batch{}, err
			}
		}
	default:
		return Batch{}, fmt.Errorf("%w: batch as %s (want an array or a map)", ErrLayout, typeName(v))
	}
	list, ok := events.([]any)
	if !ok {
		return Batch{}, fmt.Errorf("%w: batch events as %s (want an array)", ErrLayout, typeName(events))
	}
	b.Events = make([]Event, 0, len(list))
	for i, raw := range list {
		ev, err := decodeEvent(raw)
		if err != nil {
			return Batch{}, fmt.Errorf("event %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
}

func decodeEvent(v any) (Event, error) {
	switch t := v.(type) {
	case []any:
		return decodeArrayEvent(t)
	case msgpack.Map:
		return decodeMapEvent(t)
	}
	return Event{}, fmt.Errorf("%w: event as %s (want a tagged array or map)", ErrLayout, typeName(v))
}

// arrayLayouts are, by tag, the event arrays vLLM and SGLang have written:
// the kind, and the fewest and most elements the array has had.
var arrayLayouts = map[string]struct {
	kind     Kind
	min, max int
}{
	// [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
	//  medium (PR #19737), lora_name (PR #27577), extra_keys (PR #33304),
	//  group_idx (PR #37688), kv_cache_spec_kind, kv_cache_spec_sliding_window (PR #40984)]
	"BlockStored": {BlockStored, 6, 12},
	// [tag, block_hashes, medium (PR #19737), group_idx (PR #37688)]
	"BlockRemoved": {BlockRemoved, 2, 4},
	// [tag]
	"AllBlocksCleared": {AllBlocksCleared, 1, 1},
}

// decodeArrayEvent decodes the tagged arrays of array_like msgspec structs:
// the tag (the class name) first, then the fields in declaration order, the
// trailing ones equal to their default left out (omit_defaults).
func decodeArrayEvent(a []any) (Event, error) {
	if len(a) == 0 {
		return Event{}, fmt.Errorf("%w: event as an empty array", ErrLayout)
	}
	tag, ok := a[0].(string)
	if !ok {
		return Event{}, fmt.Errorf("%w: event array tagged by %s (want a class name)", ErrLayout, typeName(a[0]))
	}
	lay, ok := arrayLayouts[tag]
	if !ok {
		return Event{}, fmt.Errorf("%w: event tag %q", ErrLayout, tag)
	}
	n := len(a)
	if n < lay.min || n > lay.max {
		want := fmt.Sprintf("vLLM and SGLang have %d to %d", lay.min, lay.max)
		if lay.min == lay.max {
			want = fmt.Sprintf("want %d", lay.min)
		}
		return Event{}, fmt.Errorf("%w: %s as an array of %d elements (%s)", ErrLayout, tag, n, want)
	}
	ev := Event{Kind: lay.kind, Group: -1, Layout: fmt.Sprintf("array-%d", n)}
	var err error
	switch ev.Kind {
	case BlockStored:
		// SGLang (PR #37271) puts a metadata map in place of lora_name.
		if err = ev.stored(a[1], a[2], a[3], a[4]); err != nil {
			return Event{}, err
		}
		if a[5] != nil {
			ev.Unhashable = true // lora_id
		}
		if n > 6 {
			if ev.Medium, err = asOptString(a[6], "medium"); err != nil {
				return Event{}, err
			}
		}
		if n > 7 {
			switch m := a[7].(type) {
			case nil:
			case string:
				ev.Unhashable = true // lora_name
			case msgpack.Map: // SGLang metadata
				ev.Layout = "sglang-array-8"
				if salt, ok := m.Get("cache_salt"); ok && salt != nil {
					ev.Unhashable = true
				}
			default:
				return Event{}, fmt.Errorf("%w: BlockStored element 7 as %s (want lora_name or metadata)", ErrLayout, typeName(a[7]))
			}
		}
		if n > 8 && extraKeysSet(a[8]) {
			ev.Unhashable = true
		}
		if n > 9 && a[9] != nil {
			if ev.Group, err = asInt(a[9], "group_idx"); err != nil {
				return Event{}, err
			}
		}
	case BlockRemoved:
		if ev.Hashes, err = asHashes(a[1], "block_hashes"); err != nil {
			return Event{}, err
		}
		if n > 2 {
			if ev.Medium, err = asOptString(a[2], "medium"); err != nil {
				return Event{}, err
			}
		}
		if n > 3 && a[3] != nil {
			if ev.Group, err = asInt(a[3], "group_idx"); err != nil {
				return Event{}, err
			}
		}
	}
	return ev, nil
}

// decodeMapEvent decodes the tagged maps of vLLM PR #42892 and SGLang PR
// #37482: the tag under "type", fields by name, unknown keys ignored.
func decodeMapEvent(m msgpack.Map) (Event, error) {
	tv, _ := m.Get("type")
	tag, ok := tv.(string)
	if !ok {
		return Event{}, fmt.Errorf("%w: event map without a string \"type\"", ErrLayout)
	}
	get := func(k string) any { v, _ := m.Get(k); return v }
	ev := Event{Group: -1, Layout: "map"}
	var err error
	switch tag {
	case "BlockStored":
		ev.Kind = BlockStored
		for _, k := range []string{"block_hashes", "token_ids", "block_size"} {
			if _, ok := m.Get(k); !ok {
				return Event{}, fmt.Errorf("%w: BlockStored map without %q", ErrLayout, k)
			}
		}
		if err = ev.stored(get("block_hashes"), get("parent_block_hash"), get("token_ids"), get("block_size")); err != nil {
			return Event{}, err
		}
		if get("lora_id") != nil || get("lora_name") != nil || extraKeysSet(get("extra_keys")) {
			ev.Unhashable = true
		}
		if md, ok := get("metadata").(msgpack.Map); ok {
			if salt, ok := md.Get("cache_salt"); ok && salt != nil {
				ev.Unhashable = true
			}
		}
		if get("cache_salt") != nil {
			ev.Unhashable = true
		}
	case "BlockRemoved":
		ev.Kind = BlockRemoved
		if _, ok := m.Get("block_hashes"); !ok {
			return Event{}, fmt.Errorf("%w: BlockRemoved map without \"block_hashes\"", ErrLayout)
		}
		if ev.Hashes, err = asHashes(get("block_hashes"), "block_hashes"); err != nil {
			return Event{}, err
		}
	case "AllBlocksCleared":
		ev.Kind = AllBlocksCleared
		return ev, nil
	default:
		return Event{}, fmt.Errorf("%w: event type %q", ErrLayout, tag)
	}
	if ev.Medium, err = asOptString(get("medium"), "medium"); err != nil {
		return Event{}, err
	}
	if g := get("group_idx"); g != nil {
		if ev.Group, err = asInt(g, "group_idx"); err != nil {
			return Event{}, err
		}
	}
	return ev, nil
}

// stored decodes the four fields every BlockStored layout has.
func (ev *Event) stored(hashes, parent, tokens, blockSize any) error {
	var err error
	if ev.Hashes, err = asHashes(hashes, "block_hashes"); err != nil {
		return err
	}
	if parent != nil {
		if ev.Parent, err = engineHash(parent); err != nil {
			return fmt.Errorf("parent_block_hash: %w", err)
		}
	}
	if ev.BlockSize, err = asInt(blockSize, "block_size"); err != nil {
		return err
	}
	if ev.BlockSize < 1 {
		return fmt.Errorf("%w: block_size %d", ErrLayout, ev.BlockSize)
	}
	list, ok := tokens.([]any)
	if !ok {
		return fmt.Errorf("%w: token_ids as %s", ErrLayout, typeName(tokens))
	}
	ev.Tokens = make([]uint32, len(list))
	for i, t := range list {
		n, ok := t.(int64)
		if !ok || n < 0 || n > math.MaxUint32 {
			return fmt.Errorf("%w: token id %v", ErrLayout, t)
		}
		ev.Tokens[i] = uint32(n)
	}
	return nil
}

// extraKeysSet reports whether extra_keys gives any block an extra key.
func extraKeysSet(v any) bool {
	list, ok := v.([]any)
	if !ok {
		return v != nil
	}
	for _, e := range list {
		if e == nil {
			continue
		}
		if t, ok := e.([]any); ok && len(t) == 0 {
			continue
		}
		return true
	}
	return false
}

// engineHash turns an engine block hash into a map key. vLLM's
// ExternalBlockHash is an int, the low 64 bits of a sha256 digest, sent as
// int64 or uint64 by msgpack (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1, the
// default, vllm/envs.py), or the digest's bytes (with 0): an int keeps its
// 64 bits.
func engineHash(v any) (string, error) {
	switch t := v.(type) {
	case int64:
		return intKey(uint64(t)), nil
	case uint64:
		return intKey(t), nil
	case []byte:
		return "b" + string(t), nil
	case string:
		return "b" + t, nil
	}
	return "", fmt.Errorf("%w: block hash as %s", ErrLayout, typeName(v))
}

func intKey(u uint64) string {
	var b [9]byte
	b[0] = 'i'
	for i := range 8 {
		b[1+i] = byte(u >> (56 - 8*i))
	}
	return string(b[:])
}

func asHashes(v any, what string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s as %s", ErrLayout, what, typeName(v))
	}
	out := make([]string, len(list))
	for i, h := range list {
		k, err := engineHash(h)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", what, i, err)
		}
		out[i] = k
	}
	return out, nil
}

func asInt(v any, what string) (int, error) {
	n, ok := v.(int64)
	if !ok || n < math.MinInt32 || n > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %s as %s", ErrLayout, what, typeName(v))
	}
	return int(n), nil
}

func asFloat(v any, what string) (float64, error) {
	switch t := v.(type) {
	case float64:
		return t, nil
	case int64:
		return float64(t), nil
	}
	return 0, fmt.Errorf("%w: %s as %s", ErrLayout, what, typeName(v))
}

func asOptString(v any, what string) (string, error) {
	switch t := v.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	}
	return "", fmt.Errorf("%w: %s as %s", ErrLayout, what, typeName(v))
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "a boolean"
	case int64, uint64:
		return "an integer"
	case float64:
		return "a float"
	case string:
		return "a string"
	case []byte:
		return "bytes"
	case []any:
		return "an array"
	case msgpack.Map:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
