package fakeengine

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"fairdispatch/internal/msgpack"
)

// Layouts of the KV event batches the fake publishes, after the versions of
// vllm/distributed/kv_events.py (and SGLang's copy of it) that used them.
const (
	// LayoutV1 is the first layout (vLLM 0.9.0, SGLang): batch [ts, events],
	// BlockStored [tag, hashes, parent, tokens, block_size, lora_id],
	// BlockRemoved [tag, hashes].
	LayoutV1 = "array-6"
	// LayoutMedium adds data_parallel_rank to the batch and medium to the
	// events (vLLM PRs #18925, #19737): BlockStored of 7 elements.
	LayoutMedium = "array-7"
	// LayoutLoRAName adds lora_name (vLLM PR #27577): BlockStored of 8.
	LayoutLoRAName = "array-8"
	// LayoutExtended adds extra_keys and group_idx (PRs #33304, #37688): 10.
	LayoutExtended = "array-10"
	// LayoutMap encodes events as tagged maps (vLLM PR #42892), the batch an array.
	LayoutMap = "map"
	// LayoutMapBatch encodes the batch as a map too (vllm-project/vllm@0181ea3).
	LayoutMapBatch = "map-batch"
)

// Layouts lists every layout the fake can publish.
var Layouts = []string{LayoutV1, LayoutMedium, LayoutLoRAName, LayoutExtended, LayoutMap, LayoutMapBatch}

// kvEvent is one event before encoding.
type kvEvent struct {
	kind      string // BlockStored, BlockRemoved, AllBlocksCleared
	hashes    []blockKey
	parent    *blockKey
	tokens    []uint32
	blockSize int
}

// encodeBatch lays a batch out as msgspec encodes KVEventBatch in layout.
func encodeBatch(layout string, ts float64, rank int, events []kvEvent, intHashes bool) []byte {
	var e msgpack.Encoder
	hash := func(k blockKey) {
		if intHashes {
			e.Uint(binary.BigEndian.Uint64(k[24:])) // low 64 bits, as maybe_convert_block_hash
		} else {
			e.Bin(k[:])
		}
	}
	hashes := func(ks []blockKey) {
		e.Array(len(ks))
		for _, k := range ks {
			hash(k)
		}
	}
	opt := func(k *blockKey) {
		if k == nil {
			e.Nil()
		} else {
			hash(*k)
		}
	}
	tokens := func(ts []uint32) {
		e.Array(len(ts))
		for _, t := range ts {
			e.Uint(uint64(t))
		}
	}
	switch layout {
	case LayoutV1:
		e.Array(2)
	case LayoutMapBatch:
		e.Map(3)
		e.Str("ts")
	default:
		e.Array(3)
	}
	e.Float64(ts)
	if layout == LayoutMapBatch {
		e.Str("events")
	}
	e.Array(len(events))
	for _, ev := range events {
		if layout == LayoutMap || layout == LayoutMapBatch {
			encodeMapEvent(&e, ev, hashes, opt, tokens)
			continue
		}
		n := map[string]int{LayoutV1: 6, LayoutMedium: 7, LayoutLoRAName: 8, LayoutExtended: 10}[layout]
		switch ev.kind {
		case "BlockStored":
			e.Array(n)
			e.Str(ev.kind)
			hashes(ev.hashes)
			opt(ev.parent)
			tokens(ev.tokens)
			e.Uint(uint64(ev.blockSize))
			e.Nil() // lora_id
			if n >= 7 {
				e.Str("GPU") // medium
			}
			if n >= 8 {
				e.Nil() // lora_name
			}
			if n >= 10 {
				e.Array(len(ev.hashes)) // extra_keys: one None per block
				for range ev.hashes {
					e.Nil()
				}
				e.Uint(0) // group_idx
			}
		case "BlockRemoved":
			m := map[string]int{LayoutV1: 2, LayoutMedium: 3, LayoutLoRAName: 3, LayoutExtended: 4}[layout]
			e.Array(m)
			e.Str(ev.kind)
			hashes(ev.hashes)
			if m >= 3 {
				e.Str("GPU")
			}
			if m >= 4 {
				e.Uint(0)
			}
		default:
			e.Array(1)
			e.Str(ev.kind)
		}
	}
	switch layout {
	case LayoutV1:
	case LayoutMapBatch:
		e.Str("data_parallel_rank")
		e.Uint(uint64(rank))
	default:
		e.Uint(uint64(rank))
	}
	return e.B
}

func encodeMapEvent(e *msgpack.Encoder, ev kvEvent, hashes func([]blockKey), opt func(*blockKey), tokens func([]uint32)) {
	switch ev.kind {
	case "BlockStored":
		e.Map(11)
		e.Str("type")
		e.Str(ev.kind)
		e.Str("block_hashes")
		hashes(ev.hashes)
		e.Str("parent_block_hash")
		opt(ev.parent)
		e.Str("token_ids")
		tokens(ev.tokens)
		e.Str("block_size")
		e.Uint(uint64(ev.blockSize))
		e.Str("lora_id")
		e.Nil()
		e.Str("medium")
		e.Str("GPU")
		e.Str("lora_name")
		e.Nil()
		e.Str("extra_keys")
		e.Array(len(ev.hashes))
		for range ev.hashes {
			e.Nil()
		}
		e.Str("group_idx")
		e.Uint(0)
		e.Str("kv_cache_spec_kind")
		e.Str("full_attention")
	case "BlockRemoved":
		e.Map(4)
		e.Str("type")
		e.Str(ev.kind)
		e.Str("block_hashes")
		hashes(ev.hashes)
		e.Str("medium")
		e.Str("GPU")
		e.Str("group_idx")
		e.Uint(0)
	default:
		e.Map(1)
		e.Str("type")
		e.Str(ev.kind)
	}
}

// publisher is the ZMQ side: a PUB socket and the replay ROUTER, as
// ZmqEventPublisher in vllm/distributed/kv_events.py: frames (topic, seq,
// payload), seq 8 bytes big-endian from 0; a replay request is one frame of
// 8 bytes (the first seq wanted), answered by (seq, payload) per buffered
// batch and (-1, "") at the end, or with the topic first when replayTopic
// (vLLM's newer form, tests/distributed/test_events.py).
type publisher struct {
	topic       []byte
	replayTopic bool
	buffer      int

	mu   sync.Mutex
	pub  zmq4.Socket
	rep  zmq4.Socket
	seq  uint64
	past []pastBatch // the replay buffer, oldest first
	drop int         // batches still to leave unpublished
}

type pastBatch struct {
	seq     uint64
	payload []byte
}

var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func newPublisher(ctx context.Context, endpoint, replay, topic string, replayTopic bool, buffer int) (*publisher, error) {
	p := &publisher{topic: []byte(topic), replayTopic: replayTopic, buffer: buffer}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(endpoint); err != nil {
		return nil, fmt.Errorf("fakeengine: listen %s: %w", endpoint, err)
	}
	if replay != "" {
		p.rep = zmq4.NewRouter(ctx, zmq4.WithTimeout(time.Second))
		if err := p.rep.Listen(replay); err != nil {
			p.pub.Close()
			return nil, fmt.Errorf("fakeengine: listen %s: %w", replay, err)
		}
		go p.serveReplay()
	}
	return p, nil
}

func (p *publisher) publish(payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.past = append(p.past, pastBatch{seq, payload})
	if len(p.past) > p.buffer {
		p.past = p.past[len(p.past)-p.buffer:]
	}
	if p.drop > 0 {
		p.drop--
		return
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	_ = p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, s[:], payload))
}

// restart starts the sequence again at 0 with an empty replay buffer.
func (p *publisher) restart() {
	p.mu.Lock()
	p.seq, p.past = 0, nil
	p.mu.Unlock()
}

func (p *publisher) serveReplay() {
	for {
		m, err := p.rep.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) != 3 || len(m.Frames[2]) != 8 {
			continue // vLLM logs "Invalid replay request" and goes on
		}
		id, start := m.Frames[0], binary.BigEndian.Uint64(m.Frames[2])
		p.mu.Lock()
		past := append([]pastBatch(nil), p.past...)
		p.mu.Unlock()
		for _, b := range past {
			if b.seq < start {
				continue
			}
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], b.seq)
			if p.replayTopic {
				_ = p.rep.SendMulti(zmq4.NewMsgFrom(id, nil, p.topic, s[:], b.payload))
			} else {
				_ = p.rep.SendMulti(zmq4.NewMsgFrom(id, nil, s[:], b.payload))
			}
		}
		if p.replayTopic {
			_ = p.rep.SendMulti(zmq4.NewMsgFrom(id, nil, nil, endSeq, nil))
		} else {
			_ = p.rep.SendMulti(zmq4.NewMsgFrom(id, nil, endSeq, nil))
		}
	}
}

func (p *publisher) close() {
	p.pub.Close()
	if p.rep != nil {
		p.rep.Close()
	}
}
