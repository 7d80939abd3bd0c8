package engineworker

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"fairdispatch/wire"
)

// docs/protocol.md, Block hashes: tokens 1..10, B = 4.
const (
	vec0 = 0x7e75ba253efd3fc1
	vec1 = 0x6cdb6eff59291782
)

func seq(from, to uint32) []uint32 {
	var s []uint32
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func storedEv(parent string, size int, toks []uint32, hashes ...string) Event {
	return Event{Kind: BlockStored, Parent: parent, BlockSize: size, Tokens: toks, Hashes: hashes, Group: -1}
}

// The engine's block size need not be ours: the same prompt gives the
// protocol's test vector whether the engine cuts blocks of 4, 2 or 8 tokens.
func TestChainMatchesTheProtocolVector(t *testing.T) {
	for _, c := range []struct {
		name   string
		events []Event
	}{
		{"engine blocks of 4", []Event{storedEv("", 4, seq(1, 8), "a", "b")}},
		{"engine blocks of 2, two events", []Event{
			storedEv("", 2, seq(1, 6), "a", "b", "c"),
			storedEv("c", 2, seq(7, 10), "d", "e"),
		}},
		{"engine blocks of 8 (a partial one of ours left)", []Event{storedEv("", 8, append(seq(1, 10), 11, 12, 13, 14, 15, 16), "a", "b")}},
	} {
		ch := NewChain(4, 0, 100)
		var out []Change
		for _, ev := range c.events {
			var err error
			if out, err = ch.Apply(ev, out); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		var got []uint64
		for _, ch := range out {
			got = append(got, ch.Hashes...)
		}
		if len(got) < 2 || got[0] != vec0 || got[1] != vec1 {
			t.Errorf("%s: got %x, want %x %x first", c.name, got, uint64(vec0), uint64(vec1))
		}
	}
	if want := wire.ChainHashes(nil, seq(1, 12), 4); blockHash(blockHash(blockHash(0, seq(1, 4)), seq(5, 8)), seq(9, 12)) != want[2] {
		t.Errorf("blockHash chained differs from wire.ChainHashes")
	}
	if got := blockHash(0, seq(1, 4)); got != vec0 {
		t.Errorf("blockHash: got %x, want %x", got, uint64(vec0))
	}
}

func TestChainChanges(t *testing.T) {
	ch := NewChain(4, 0, 100)
	apply := func(ev Event) ([]Change, error) { return ch.Apply(ev, nil) }

	got, err := apply(storedEv("", 4, seq(1, 8), "a", "b"))
	if want := []Change{{Op: OpStored, Tier: wire.Device, Hashes: []uint64{vec0, vec1}}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("stored: got %v %v, want %v", got, err, want)
	}
	// Offloaded to the CPU: known blocks, no tokens needed.
	got, _ = apply(Event{Kind: BlockStored, Hashes: []string{"a"}, BlockSize: 4, Medium: "CPU", Group: -1})
	if want := []Change{{Op: OpStored, Tier: wire.Host, Hashes: []uint64{vec0}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("offload: got %v, want %v", got, want)
	}
	got, _ = apply(Event{Kind: BlockRemoved, Hashes: []string{"b", "zz"}, Group: -1})
	if want := []Change{{Op: OpRemoved, Tier: wire.Device, Hashes: []uint64{vec1}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("removed: got %v, want %v", got, want)
	}
	if held := ch.Held(); !reflect.DeepEqual(held, [wire.NumTiers][]uint64{{vec0}, {vec0}}) {
		t.Errorf("held: got %v", held)
	}
	if _, err := apply(storedEv("b", 4, seq(9, 12), "c")); !errors.Is(err, ErrUnknownParent) {
		t.Errorf("parent removed: got %v, want ErrUnknownParent", err)
	}
	// Another KV cache group is ignored; a LoRA block and its children get no hash.
	if got, _ := apply(Event{Kind: BlockStored, Hashes: []string{"g"}, Tokens: seq(1, 4), BlockSize: 4, Group: 1}); got != nil {
		t.Errorf("group 1: got %v", got)
	}
	lora := storedEv("", 4, seq(1, 4), "l")
	lora.Unhashable = true
	if got, _ := apply(lora); got != nil {
		t.Errorf("lora: got %v", got)
	}
	if got, err := apply(storedEv("l", 4, seq(5, 8), "l2")); got != nil || err != nil {
		t.Errorf("child of lora: got %v %v", got, err)
	}
	if _, err := apply(Event{Kind: BlockStored, Hashes: []string{"m"}, Tokens: seq(1, 4), BlockSize: 4, Medium: "NVME", Group: -1}); !errors.Is(err, ErrLayout) {
		t.Errorf("medium: got %v, want ErrLayout", err)
	}
	got, _ = apply(Event{Kind: AllBlocksCleared, Group: -1})
	if want := []Change{{Op: OpCleared}}; !reflect.DeepEqual(got, want) || ch.Len() != 0 {
		t.Errorf("cleared: got %v (len %d), want %v", got, ch.Len(), want)
	}
}

// TestChainCopies: vLLM keeps a copy of a block per request that filled it
// (vllm/v1/core/block_pool.py does not de-duplicate), stores and removes each
// copy with an event of its own, and a block leaves a tier with its last copy
// there. Removing one of two copies keeps the block, so a request that then
// extends it from the surviving copy finds its parent.
func TestChainCopies(t *testing.T) {
	ch := NewChain(4, 0, 100)
	apply := func(ev Event) []Change {
		t.Helper()
		out, err := ch.Apply(ev, nil)
		if err != nil {
			t.Fatalf("%v: %v", ev, err)
		}
		return out
	}
	apply(storedEv("", 4, seq(1, 8), "a", "b"))
	apply(storedEv("", 4, seq(1, 8), "a", "b")) // a second request's copy
	if got := apply(Event{Kind: BlockRemoved, Hashes: []string{"b", "a"}, Group: -1}); got != nil {
		t.Errorf("one copy of two removed: got %v, want no change", got)
	}
	got := apply(storedEv("b", 4, seq(9, 12), "c"))
	if want := wire.ChainHashes(nil, seq(1, 12), 4)[2:]; len(got) != 1 || !reflect.DeepEqual(got[0].Hashes, want) {
		t.Errorf("extended from the surviving copy: got %v, want stored %x", got, want)
	}
	got = apply(Event{Kind: BlockRemoved, Hashes: []string{"c", "b", "a"}, Group: -1})
	h := wire.ChainHashes(nil, seq(1, 12), 4)
	if want := []Change{{Op: OpRemoved, Tier: wire.Device, Hashes: []uint64{h[2], h[1], h[0]}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("the last copies removed: got %v, want %v", got, want)
	}
	if ch.Len() != 0 {
		t.Errorf("held %d engine blocks after every copy was removed", ch.Len())
	}
	// A copy in another tier is counted apart: offloaded, then dropped from
	// the device, the block stays in the host tier.
	apply(storedEv("", 4, seq(1, 4), "a"))
	apply(Event{Kind: BlockStored, Hashes: []string{"a"}, BlockSize: 4, Medium: "CPU", Group: -1})
	apply(Event{Kind: BlockRemoved, Hashes: []string{"a"}, Group: -1})
	if held := ch.Held(); len(held[wire.Device]) != 0 || len(held[wire.Host]) != 1 {
		t.Errorf("after offload and device eviction: held %v, want the block in the host tier only", held)
	}
}

// TestChainCollision: an engine whose block hashes name a block by its own
// tokens, not its prefix (SGLang before its position-aware hashes), gives
// one hash to the same page after different prefixes. The chain holds it
// under its first parent; stored again under another, it and the rest of
// the event are left out (ErrCollision) rather than reported as the first
// prefix's blocks, which the engine may not hold after this one.
func TestChainCollision(t *testing.T) {
	ch := NewChain(4, 0, 100)
	if _, err := ch.Apply(storedEv("", 4, seq(1, 8), "A", "B"), nil); err != nil {
		t.Fatal(err)
	}
	// [C B]: the page B after C, under B's hash.
	got, err := ch.Apply(storedEv("", 4, append(seq(20, 23), seq(5, 8)...), "C", "B"), nil)
	if !errors.Is(err, ErrCollision) {
		t.Fatalf("B under another parent: err %v, want ErrCollision", err)
	}
	if want := []Change{{Op: OpStored, Tier: wire.Device, Hashes: wire.ChainHashes(nil, seq(20, 23), 4)}}; !reflect.DeepEqual(got, want) {
		t.Errorf("stored %v, want C's block only", got)
	}
	// The same block stored again under its own parent, and an offload
	// without tokens listing blocks of any chain, are no collision.
	if _, err := ch.Apply(storedEv("A", 4, seq(5, 8), "B"), nil); err != nil {
		t.Errorf("B again after A: %v", err)
	}
	if _, err := ch.Apply(Event{Kind: BlockStored, Hashes: []string{"C", "B"}, BlockSize: 4, Medium: "CPU", Group: -1}, nil); err != nil {
		t.Errorf("an offload of C and B: %v", err)
	}
}

func TestChainBounded(t *testing.T) {
	ch := NewChain(4, 0, 1)
	if _, err := ch.Apply(storedEv("", 4, seq(1, 8), "a", "b"), nil); !errors.Is(err, ErrOverflow) {
		t.Fatalf("got %v, want ErrOverflow", err)
	}
}

// TestTierOf: the media of vLLM and SGLang (HiCache's CPU_PINNED and
// EXTERNAL among them) map to tiers, any case; another is an error naming it.
func TestTierOf(t *testing.T) {
	for medium, want := range map[string]wire.Tier{"": wire.Device, "GPU": wire.Device, "cpu": wire.Host,
		"CPU_PINNED": wire.Host, "DISK": wire.Disk, "STORAGE": wire.Disk, "EXTERNAL": wire.Disk, "shared": wire.Shared} {
		if got, err := TierOf(medium); err != nil || got != want {
			t.Errorf("TierOf(%q) = %v, %v; want %v", medium, got, err, want)
		}
	}
	if _, err := TierOf("TAPE"); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "TAPE") {
		t.Errorf("TierOf(TAPE): %v, want ErrLayout naming it", err)
	}
}
