package engineworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/internal/fakeengine"
	"fairdispatch/internal/natstest"
	"fairdispatch/wire"
)

// sink records the cache changes of rank 0 as a set of held hashes.
type sink struct {
	mu      sync.Mutex
	held    map[uint64]bool
	cleared int
}

func (s *sink) CacheStored(_ int, _ wire.Tier, hs []uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		s.held[h] = true
	}
	return nil
}

func (s *sink) CacheRemoved(_ int, _ wire.Tier, hs []uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		delete(s.held, h)
	}
	return nil
}

func (s *sink) CacheCleared(int, wire.Tiers) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = map[uint64]bool{}
	s.cleared++
	return nil
}

func (s *sink) CacheResync(_ int, held *[wire.NumTiers][]uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = map[uint64]bool{}
	for _, hs := range held {
		for _, h := range hs {
			s.held[h] = true
		}
	}
	return nil
}

// is reports whether the held set is exactly want.
func (s *sink) is(want map[uint64]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) != len(want) {
		return false
	}
	for h := range want {
		if !s.held[h] {
			return false
		}
	}
	return true
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d held, %d clears", len(s.held), s.cleared)
}

func zmqAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// kvRig is a fake engine publishing KV events and the KV side of a worker
// following it into a sink.
type kvRig struct {
	t   *testing.T
	e   *fakeengine.Engine
	url string
	w   *Worker
	s   *sink
}

func newKVRig(t *testing.T, ecfg fakeengine.Config, replay bool) *kvRig {
	t.Helper()
	ecfg.KVEndpoint = zmqAddr(t)
	if replay {
		ecfg.ReplayEndpoint = zmqAddr(t)
	}
	e, url := startFake(t, ecfg)
	cfg, err := Config{Engine: "vllm", EngineURL: url, MaxNumSeqs: 8, KVEndpoint: ecfg.KVEndpoint, ReplayEndpoint: ecfg.ReplayEndpoint}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{held: map[uint64]bool{}}
	w := &Worker{cfg: cfg, log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), kv: s,
		chains: []*Chain{NewChain(cfg.BlockSize, 0, 1<<20)}, gone: []chan struct{}{make(chan struct{}, 1)}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.kvLoop(ctx, 0) }()
	t.Cleanup(func() { cancel(); <-done })
	return &kvRig{t: t, e: e, url: url, w: w, s: s}
}

// chat runs one chat request at the engine and returns the block hashes a
// producer computes for it: wire.ChainHashes of the engine's /tokenize ids.
func (k *kvRig) chat(msgs ...fakeengine.Message) []uint64 {
	k.t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "fake-model", "messages": msgs, "max_tokens": 1})
	resp, err := http.Post(k.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		k.t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Post(k.url+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		k.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		k.t.Fatal(err)
	}
	return wire.ChainHashes(nil, v.Tokens, 16)
}

// prompt is a chat of n words after a system prompt shared by its family.
func prompt(family, id, n int) []fakeengine.Message {
	words := func(tag string, k int) string {
		var b strings.Builder
		for i := range k {
			fmt.Fprintf(&b, "%s%d ", tag, i)
		}
		return b.String()
	}
	return []fakeengine.Message{
		{Role: "system", Content: words(fmt.Sprintf("sys%d-", family), 40)},
		{Role: "user", Content: words(fmt.Sprintf("q%d-", id), n)},
	}
}

func union(sets ...[]uint64) map[uint64]bool {
	out := map[uint64]bool{}
	for _, s := range sets {
		for _, h := range s {
			out[h] = true
		}
	}
	return out
}

// waitHeld waits until the sink holds exactly want.
func (k *kvRig) waitHeld(want map[uint64]bool, what string) {
	k.t.Helper()
	natstest.Eventually(k.t, 10*time.Second, func() bool { return k.s.is(want) }, "%s: want %d hashes held, sink %v, stats %+v", what, len(want), k.s, k.w.Stats())
}

// warm makes sure the subscriber receives live batches: ZMQ drops what a
// PUB sends before the SUB's connection is up.
func (k *kvRig) warm() map[uint64]bool {
	k.t.Helper()
	held := map[uint64]bool{}
	natstest.Eventually(k.t, 10*time.Second, func() bool {
		for _, h := range k.chat(prompt(99, int(k.e.Stats().Requests), 20)...) {
			held[h] = true
		}
		return k.w.Stats().Batches > 0
	}, "the subscriber gets a live batch")
	return held
}

// TestKVHashesMatchTheProducers is the tokens-for-routing rule: for chat
// prompts sharing a system prompt, the hashes the worker derives from the
// engine's BlockStored events are the hashes a producer computes with
// wire.ChainHashes from the engine's token ids (its /tokenize), whatever
// the engine's block size (vLLM's 16, a small page, SGLang's page of 1).
func TestKVHashesMatchTheProducers(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{16, 4, 1} {
		t.Run(fmt.Sprint("engine block size ", bs), func(t *testing.T) {
			t.Parallel()
			k := newKVRig(t, fakeengine.Config{BlockSize: bs}, true)
			want := k.warm()
			a := k.chat(prompt(1, 1, 30)...)
			b := k.chat(prompt(1, 2, 50)...) // the same system prompt: its blocks are cached
			c := k.chat(prompt(2, 3, 10)...)
			if len(a) < 3 || a[0] != b[0] || a[0] == c[0] {
				t.Fatalf("the workload is wrong: %d blocks; shared first block %v, other family's %v", len(a), a[0] == b[0], a[0] == c[0])
			}
			k.waitHeld(union(keys(want), a, b, c), "three chats")
		})
	}
}

// TestKVGapHealedByReplay drops a batch: the next one shows the gap, the
// worker replays the missing batch from the engine's replay socket, and
// what it reports is exactly what the engine holds.
func TestKVGapHealedByReplay(t *testing.T) {
	t.Parallel()
	k := newKVRig(t, fakeengine.Config{}, true)
	held := k.warm()
	k.e.DropEvents(1)
	a := k.chat(prompt(1, 1, 30)...) // its BlockStored is never published
	b := k.chat(prompt(2, 2, 30)...)
	k.waitHeld(union(keys(held), a, b), "after the gap")
	if s := k.w.Stats(); s.Gaps != 1 || s.Replays < 1 || s.Resets != 0 {
		t.Fatalf("stats %+v: want one gap, healed by a replay, no reset", s)
	}
}

// TestKVGapWithoutReplayResets: with no replay socket, a gap clears the
// rank (a resynchronisation: the index may miss blocks, never holds a
// wrong one), and what follows is reported again.
func TestKVGapWithoutReplayResets(t *testing.T) {
	t.Parallel()
	k := newKVRig(t, fakeengine.Config{}, false)
	k.warm()
	k.e.DropEvents(1)
	k.chat(prompt(1, 1, 30)...)
	b := k.chat(prompt(2, 2, 30)...)
	k.waitHeld(union(b), "after the gap")
	if s := k.w.Stats(); s.Gaps != 1 || s.Resets != 1 {
		t.Fatalf("stats %+v: want one gap and one reset", s)
	}
}

// TestKVEngineRestart: a restarted engine (its sequence back at 0, its
// cache empty) clears the rank at its first batch; AllBlocksCleared clears
// it at once; so does the engine process going away (healthLoop's signal).
func TestKVEngineRestart(t *testing.T) {
	t.Parallel()
	k := newKVRig(t, fakeengine.Config{}, true)
	k.warm()
	k.chat(prompt(1, 1, 30)...)
	k.e.Restart(false)
	c := k.chat(prompt(2, 2, 30)...)
	k.waitHeld(union(c), "after a silent restart")
	k.e.Restart(true)
	k.waitHeld(union(), "after AllBlocksCleared")
	d := k.chat(prompt(3, 3, 30)...)
	k.waitHeld(union(d), "after the restart")
	k.w.gone[0] <- struct{}{}
	k.waitHeld(union(), "after the engine went away")
	if s := k.w.Stats(); s.Resets < 2 {
		t.Fatalf("stats %+v: want a reset for the restart and one for the engine gone", s)
	}
}

// TestKVBatchRefusedResets: a batch in no known layout is refused by name
// and resets the rank (it may have held removals).
func TestKVBatchRefusedResets(t *testing.T) {
	t.Parallel()
	s := &sink{held: map[uint64]bool{1: true}}
	w := &Worker{log: zerolog.Nop(), kv: s, chains: []*Chain{NewChain(16, 0, 100)}}
	w.apply(&kvRank{last: 4}, zmqMsg{seq: 5, payload: []byte{0x93, 0x01, 0x02, 0x03}}) // [1, 2, 3]
	if st := w.Stats(); st.LayoutErrors != 1 || st.Resets != 1 || len(s.held) != 0 {
		t.Fatalf("stats %+v, sink %v: want the batch refused and the rank reset", st, s)
	}
}

func keys(m map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	return out
}
