package ingest

import (
	"time"

	"github.com/rs/zerolog"
)

// Keeper keeps the messages of held requests from redelivery (docs/design.md, Delivery guarantees): Tick sends
// a progress acknowledgement (+WPI, which restarts the server's ack wait) for each
// message untouched for at least half the ack wait, and for no other. Messages are
// keyed by stream sequence.
//
// It is a FIFO of (stream seq, generation, last touched) stamps in touch order,
// with lazy deletion: Drop and re-Hold only change the map, and Tick discards
// stale stamps when they reach the front. Every operation is amortised O(1);
// memory is O(held + messages touched within the last half ack wait).
//
// Keeper is not safe for concurrent use: the queue actor owns it. The times given
// to Hold and Tick must not go backwards (a monotonic clock reading).
type Keeper struct {
	half time.Duration
	log  zerolog.Logger
	held map[uint64]kept
	fifo []stamp // fifo[head:] is the queue
	head int
	gen  uint64
}

type kept struct {
	msg *Msg
	gen uint64
}

// stamp is one entry of the FIFO. Its time is Unix nanoseconds, not a
// time.Time: 24 bytes in place of 40 per held request (docs/bench.md, Memory
// per held request).
type stamp struct {
	seq, gen uint64
	at       int64
}

// DefaultAckWait is the ack wait a Keeper assumes when given a non-positive one
// (docs/config.md, Flags and environment: --ack-wait 30s).
const DefaultAckWait = 30 * time.Second

// NewKeeper returns an empty Keeper for a consumer whose ack wait is ackWait
// (a non-positive ackWait means DefaultAckWait).
func NewKeeper(ackWait time.Duration, log zerolog.Logger) *Keeper {
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	half := ackWait / 2
	if half <= 0 {
		half = 1
	}
	return &Keeper{
		half: half,
		log:  log.With().Str("component", "ingest").Logger(),
		held: make(map[uint64]kept),
	}
}

// Len returns the number of held messages.
func (k *Keeper) Len() int { return len(k.held) }

// Hold starts keeping message m of stream sequence seq, received (or last
// acknowledged) at now. Holding a sequence already held replaces its message and
// restarts its clock. The Keeper keeps the pointer: a redelivery of a held
// request replaces the message where it lies (docs/design.md, Delivery
// guarantees: the request is not queued twice), and the Keeper acknowledges
// the new one from then on.
func (k *Keeper) Hold(seq uint64, m *Msg, now time.Time) {
	k.gen++
	k.held[seq] = kept{msg: m, gen: k.gen}
	k.push(stamp{seq: seq, gen: k.gen, at: now.UnixNano()})
	k.compact()
}

// Msg returns the current message of the held sequence seq.
func (k *Keeper) Msg(seq uint64) (*Msg, bool) {
	e, ok := k.held[seq]
	return e.msg, ok
}

// Drop stops keeping seq, when its request leaves the dispatcher, and returns its
// message (for the final acknowledgement by whoever owns it next).
func (k *Keeper) Drop(seq uint64) (*Msg, bool) {
	e, ok := k.held[seq]
	if !ok {
		return nil, false
	}
	delete(k.held, seq)
	k.compact()
	return e.msg, true
}

// Tick sends a progress acknowledgement for every held message untouched for at
// least half the ack wait, restarts their clocks at now, and returns how many were
// sent. Call it at least every quarter of the ack wait or so; each message is then
// acknowledged about every half ack wait, whatever the Tick rate.
func (k *Keeper) Tick(now time.Time) int {
	sent := 0
	for k.head < len(k.fifo) {
		s := k.fifo[k.head]
		e, ok := k.held[s.seq]
		if !ok || e.gen != s.gen {
			k.pop()
			continue
		}
		if time.Duration(now.UnixNano()-s.at) < k.half {
			break
		}
		k.pop()
		if err := e.msg.InProgress(); err != nil {
			k.log.Warn().Err(err).Uint64("stream_seq", s.seq).Msg("progress acknowledgement")
		} else {
			sent++
		}
		k.push(stamp{seq: s.seq, gen: s.gen, at: now.UnixNano()})
	}
	return sent
}

// NakAll hands every held message back for immediate redelivery (SIGTERM, docs/design.md, Delivery guarantees),
// oldest touch first, empties the Keeper and returns how many NAKs were sent.
func (k *Keeper) NakAll() int {
	n := 0
	for _, s := range k.fifo[k.head:] {
		e, ok := k.held[s.seq]
		if !ok || e.gen != s.gen {
			continue
		}
		delete(k.held, s.seq)
		if err := e.msg.Nak(); err != nil {
			k.log.Warn().Err(err).Uint64("stream_seq", s.seq).Msg("hand back")
			continue
		}
		n++
	}
	clear(k.held)
	k.fifo, k.head = nil, 0
	return n
}

func (k *Keeper) push(s stamp) {
	k.fifo = append(k.fifo, s)
}

// pop removes the front stamp; the consumed prefix is reclaimed once it is at
// least half the slice, which keeps pops amortised O(1).
func (k *Keeper) pop() {
	k.fifo[k.head] = stamp{}
	k.head++
	if k.head == len(k.fifo) {
		k.fifo, k.head = k.fifo[:0], 0
	} else if k.head >= 1024 && 2*k.head >= len(k.fifo) {
		n := copy(k.fifo, k.fifo[k.head:])
		k.fifo, k.head = k.fifo[:n], 0
	}
}

// compact drops stale stamps once they outnumber live ones by more than two to
// one (plus slack), so that churn behind a recent front cannot grow the FIFO
// without bound. Its O(len) cost is paid for by the stale stamps since the last
// compaction, so it is amortised O(1).
func (k *Keeper) compact() {
	q := len(k.fifo) - k.head
	if q < 1024 || q <= 3*len(k.held) {
		return
	}
	live := k.fifo[:0]
	for _, s := range k.fifo[k.head:] {
		if e, ok := k.held[s.seq]; ok && e.gen == s.gen {
			live = append(live, s)
		}
	}
	clear(k.fifo[len(live):])
	k.fifo, k.head = live, 0
}
