package workerkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// Defaults of [KVConfig].
const (
	// DefaultKVFlushInterval is how long cache changes gather into one event.
	DefaultKVFlushInterval = 5 * time.Millisecond
	// DefaultKVMaxPending bounds the KV events awaiting JetStream's acknowledgement.
	DefaultKVMaxPending = 256
	// kvMaxRankOps bounds the hashes of one rank's changes waiting to be
	// published: past it they are dropped and the rank is resynchronised.
	kvMaxRankOps = 64 * wire.MaxHashes
	// kvMinBackoff and kvMaxBackoff bound the wait before publishing again
	// after a failed publish (no KV stream, no permission, no server), so
	// that the resynchronisations it triggers do not spin.
	kvMinBackoff = 100 * time.Millisecond
	kvMaxBackoff = 5 * time.Second
)

// ErrKV is returned by the Cache methods when KV cache events are not enabled
// or the rank is not the worker's.
var ErrKV = errors.New("worker: kv cache events")

// KVConfig configures the KV cache events of a Worker (docs/protocol.md, KV
// cache events), enabled by [Worker.EnableKVEvents].
type KVConfig struct {
	// Resync is called, on the helper's KV goroutine with no lock of the
	// helper held, when a rank must be resynchronised: at Start (every rank),
	// when the dispatcher asks (<prefix>.kvsync.<id>), and when an event of
	// the rank could not be published or its changes overflowed. The engine
	// answers by calling [Worker.CacheResync] with every block the rank holds,
	// under the same exclusion as its other Cache calls (for example at once,
	// holding the lock under which it calls them). Nil: the helper
	// resynchronises the rank as empty (a cleared of every tier), which keeps
	// the dispatcher's index correct but without what the rank held.
	Resync func(rank int)
	// FlushInterval is how long changes gather into one event before they are
	// published, default 5ms, 0 to 1s.
	FlushInterval time.Duration
	// MaxPending bounds the events awaiting JetStream's acknowledgement,
	// default 256; past it publishing waits.
	MaxPending int
}

// KVStats counts what the KV cache events of a Worker did.
type KVStats struct {
	Sent     uint64 // events handed to JetStream (asynchronous publishes)
	Failed   uint64 // events JetStream did not acknowledge (the rank is then resynchronised)
	Resyncs  uint64 // resynchronisations gathered (CacheResync calls)
	Requests uint64 // resynchronisation requests received from the dispatcher
}

// kvBatch is the changes of one rank that will form one event.
type kvBatch struct {
	cleared wire.Tiers
	removed [wire.NumTiers][]uint64
	stored  [wire.NumTiers][]uint64
	// inStored: the tiers of each hash in stored, to tell a removal of a
	// block stored in this batch (which must go in a later event).
	inStored map[uint64]wire.Tiers
}

// kvRank is one rank's state: its event counter and the batches not yet
// published, the last one open.
type kvRank struct {
	lastID  uint64
	batches []*kvBatch
	ops     int  // hashes in batches
	resync  bool // a resynchronisation is wanted
}

// kvPublisher publishes the KV cache events of one Worker.
type kvPublisher struct {
	w       *Worker
	cfg     KVConfig
	subj    string
	syncSub string
	js      jetstream.JetStream
	kick    chan struct{} // cap 1
	quit    chan struct{}
	done    chan struct{}

	mu    sync.Mutex
	ranks []kvRank // indexed by rank - DPStart
	stats KVStats
	// After a failed publish the next flush waits until retryAt; failWait
	// doubles from kvMinBackoff to kvMaxBackoff while failures go on, and
	// lastFail is the time of the last one.
	retryAt, lastFail time.Time
	failWait          time.Duration
	sub               *nats.Subscription
	started           bool
}

// EnableKVEvents makes the worker publish its engine's KV cache changes, told
// by [Worker.CacheStored], [Worker.CacheRemoved], [Worker.CacheCleared] and
// [Worker.CacheResync], as events on the JetStream stream subject
// <prefix>.kv.<id>, and resynchronise a rank when the dispatcher asks on
// <prefix>.kvsync.<id> (docs/protocol.md, KV cache events). Call it before
// Start. At Start every rank is resynchronised (its first event, event_id 1,
// clears every tier), so a restarted worker never leaves its predecessor's
// blocks in the index.
//
// Changes gather per rank for cfg.FlushInterval and go out as one event, with
// event_id 1, 2, 3... per rank within the worker's instance. A batch is cut
// where merging would change the meaning (a block stored and then removed,
// a clear after stores) or a list reaches 8192 hashes. Events go out with
// asynchronous JetStream publishes, at most cfg.MaxPending unacknowledged, in
// order on the worker's connection, each with
// Nats-Msg-Id <id>.<instance>.<dp_rank>.<event_id>. An event that JetStream
// does not acknowledge is not retried: the rank is resynchronised instead,
// which heals the gap the dispatcher may have seen.
func (w *Worker) EnableKVEvents(cfg KVConfig) error {
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultKVFlushInterval
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultKVMaxPending
	}
	if cfg.FlushInterval < 0 || cfg.FlushInterval > time.Second || cfg.MaxPending < 1 {
		return fmt.Errorf("%w: kv flush interval %v (want 0 to 1s), max pending %d (want >= 1)", ErrConfig, cfg.FlushInterval, cfg.MaxPending)
	}
	names, err := naming.New(w.cfg.Prefix)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p := &kvPublisher{
		w: w, cfg: cfg, subj: names.KV(w.cfg.ID), syncSub: names.KVSync(w.cfg.ID),
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		ranks: make([]kvRank, w.cfg.DPSize),
	}
	p.js, err = jetstream.New(w.nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncErrHandler(p.failed))
	if err != nil {
		return fmt.Errorf("worker: kv events: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.kv != nil {
		return ErrStarted
	}
	w.kv = p
	return nil
}

// KVStats returns the counters of the KV cache events (zero when not enabled).
func (w *Worker) KVStats() KVStats {
	p := w.kvPub()
	if p == nil {
		return KVStats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (w *Worker) kvPub() *kvPublisher {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kv
}

// CacheStored tells the helper that rank now holds the blocks hashes (chained
// block hashes, wire.ChainHashes) in tier. It does not block; the hashes
// are copied.
func (w *Worker) CacheStored(rank int, tier wire.Tier, hashes []uint64) error {
	return w.kvChange(rank, func(p *kvPublisher, r *kvRank) {
		for _, h := range hashes {
			p.open(r, tier, false).store(tier, h)
			r.ops++
		}
	}, tier)
}

// CacheRemoved tells the helper that rank dropped the blocks hashes from
// tier. It does not block; the hashes are copied.
func (w *Worker) CacheRemoved(rank int, tier wire.Tier, hashes []uint64) error {
	return w.kvChange(rank, func(p *kvPublisher, r *kvRank) {
		for _, h := range hashes {
			// A removal is applied before the stores of its event: a block
			// stored in this batch and now removed needs a new event.
			if r.batches[len(r.batches)-1].inStored[h].Has(tier) {
				p.cut(r)
			}
			b := p.open(r, tier, true)
			b.removed[tier] = append(b.removed[tier], h)
			r.ops++
		}
	}, tier)
}

// CacheCleared tells the helper that rank dropped every block of tiers.
func (w *Worker) CacheCleared(rank int, tiers wire.Tiers) error {
	return w.kvChange(rank, func(p *kvPublisher, r *kvRank) {
		b := r.batches[len(r.batches)-1]
		// cleared is applied first in an event: after stores or removals in
		// the batch, it needs a new one.
		if b.inStored != nil || b.hasRemoved() {
			b = p.cut(r)
		}
		b.cleared |= tiers
	}, 0)
}

// CacheResync replaces everything the helper will publish about rank with a
// resynchronisation (docs/protocol.md, Resynchronisation): a cleared of every
// tier and then held, the blocks the rank holds in each tier. Changes of the
// rank not yet published are dropped (the resynchronisation supersedes them).
// Call it from [KVConfig.Resync], or at any time.
func (w *Worker) CacheResync(rank int, held *[wire.NumTiers][]uint64) error {
	return w.kvChange(rank, func(p *kvPublisher, r *kvRank) {
		r.batches = r.batches[:0]
		r.ops = 0
		r.resync = false
		p.cut(r).cleared = wire.AllTiers
		if held == nil {
			return
		}
		// The snapshot is not counted against kvMaxRankOps: it is as large
		// as the rank's cache, whatever the bound, and counting it would
		// drop it and ask for another, for ever. The bound is for the
		// changes that pile up after it.
		for t := range wire.NumTiers {
			for _, h := range held[t] {
				p.open(r, t, false).store(t, h)
			}
		}
		p.stats.Resyncs++
	}, 0)
}

// kvChange applies one change to rank's batches under the publisher's lock.
func (w *Worker) kvChange(rank int, f func(*kvPublisher, *kvRank), tier wire.Tier) error {
	p := w.kvPub()
	if p == nil {
		return fmt.Errorf("%w: not enabled", ErrKV)
	}
	i := rank - w.cfg.DPStart
	if i < 0 || i >= len(p.ranks) || tier >= wire.NumTiers {
		return fmt.Errorf("%w: rank %d or tier %d outside the worker's", ErrKV, rank, tier)
	}
	p.mu.Lock()
	r := &p.ranks[i]
	if len(r.batches) == 0 {
		r.batches = append(r.batches, &kvBatch{})
	}
	f(p, r)
	if r.ops > kvMaxRankOps {
		// Bounded memory: drop the rank's unpublished changes and
		// resynchronise it instead.
		r.batches, r.ops, r.resync = r.batches[:0], 0, true
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return nil
}

func (b *kvBatch) hasRemoved() bool {
	for _, l := range b.removed {
		if len(l) > 0 {
			return true
		}
	}
	return false
}

// store adds h to b's stored blocks of tier t.
func (b *kvBatch) store(t wire.Tier, h uint64) {
	b.stored[t] = append(b.stored[t], h)
	if b.inStored == nil {
		b.inStored = map[uint64]wire.Tiers{}
	}
	b.inStored[h] |= 1 << t
}

// empty reports whether b holds no change.
func (b *kvBatch) empty() bool { return b.cleared == 0 && b.inStored == nil && !b.hasRemoved() }

// cut closes r's open batch (if it holds anything) and returns a new one.
func (p *kvPublisher) cut(r *kvRank) *kvBatch {
	if n := len(r.batches); n > 0 && r.batches[n-1].empty() {
		return r.batches[n-1]
	}
	b := &kvBatch{}
	r.batches = append(r.batches, b)
	return b
}

// open returns r's open batch with room for one more hash in tier's stored
// (or removed) list.
func (p *kvPublisher) open(r *kvRank, t wire.Tier, removed bool) *kvBatch {
	b := r.batches[len(r.batches)-1]
	l := b.stored[t]
	if removed {
		l = b.removed[t]
	}
	if len(l) >= wire.MaxHashes {
		b = &kvBatch{}
		r.batches = append(r.batches, b)
	}
	return b
}

// start subscribes to resynchronisation requests, asks for a
// resynchronisation of every rank and starts the publishing goroutine; w.mu
// is held.
func (p *kvPublisher) start() error {
	sub, err := p.w.nc.Subscribe(p.syncSub, p.onResyncRequest)
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", p.syncSub, err)
	}
	p.mu.Lock()
	p.sub, p.started = sub, true
	for i := range p.ranks {
		p.ranks[i].resync = true
	}
	p.mu.Unlock()
	go p.loop()
	p.kickNow()
	return nil
}

func (p *kvPublisher) kickNow() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// onResyncRequest handles {"dp_rank": r} on <prefix>.kvsync.<id>.
func (p *kvPublisher) onResyncRequest(m *nats.Msg) {
	var req wire.KVResync
	if err := json.Unmarshal(m.Data, &req); err != nil {
		p.w.log.Warn().Err(err).Str("subject", m.Subject).Msg("undecodable KV resync request")
		return
	}
	i := int(req.Rank) - p.w.cfg.DPStart
	p.mu.Lock()
	if i < 0 || i >= len(p.ranks) {
		p.mu.Unlock()
		p.w.log.Warn().Int32("dp_rank", req.Rank).Msg("KV resync request for a rank outside this worker")
		return
	}
	p.stats.Requests++
	p.ranks[i].resync = true
	p.mu.Unlock()
	p.kickNow()
}

// failed is JetStream's error handler of an asynchronous publish: the rank
// of the event is resynchronised. A failure while no back-off is in force
// (the first of a flush's events to fail) starts one: the next flush waits
// failWait, which doubles from kvMinBackoff to kvMaxBackoff while failures go
// on. Later failures of events published before it began (the rest of that
// flush) neither double nor extend it: otherwise two flushes' failures, each
// landing inside the other's wait, kept the wait at its minimum for ever (a
// KV stream refusing every event saw a dozen refused resynchronisations a
// second, where one every 5 s was meant).
func (p *kvPublisher) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	id := m.Header.Get(jetstream.MsgIDHeader)
	parts := strings.Split(id, ".")
	now := time.Now()
	p.mu.Lock()
	p.stats.Failed++
	first := p.failWait == 0 || now.Sub(p.lastFail) > 2*kvMaxBackoff
	start := first || !now.Before(p.retryAt)
	switch {
	case first:
		p.failWait = kvMinBackoff
	case start:
		p.failWait = min(2*p.failWait, kvMaxBackoff)
	}
	if start {
		p.retryAt = now.Add(p.failWait)
	}
	p.lastFail = now
	wait := time.Until(p.retryAt)
	if len(parts) == 4 {
		if rank, perr := strconv.Atoi(parts[2]); perr == nil {
			if i := rank - p.w.cfg.DPStart; i >= 0 && i < len(p.ranks) {
				p.ranks[i].resync = true
			}
		}
	}
	p.mu.Unlock()
	ev := p.w.log.Debug()
	if first {
		ev = p.w.log.Warn()
	}
	ev.Err(err).Str("subject", m.Subject).Str("event", id).Dur("retry_in", wait).
		Msg("KV cache event not acknowledged; resynchronising the rank (later failures in a row are logged at debug)")
	p.kickNow()
}

// loop publishes the gathered events FlushInterval after a change (later
// while backing off after a failed publish: a failure that starts a back-off
// while the loop waits moves the flush to its end), and runs the
// resynchronisations wanted, until stop.
func (p *kvPublisher) loop() {
	defer close(p.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			p.flush()
			return
		case <-p.kick:
		}
		wait := p.cfg.FlushInterval
		for {
			p.mu.Lock()
			wait = max(wait, time.Until(p.retryAt))
			p.mu.Unlock()
			t.Reset(wait)
			select {
			case <-p.quit:
				p.flush()
				return
			case <-t.C:
			}
			p.mu.Lock()
			wait = time.Until(p.retryAt)
			p.mu.Unlock()
			if wait <= 0 {
				break
			}
		}
		p.flush()
	}
}

// flush runs the wanted resynchronisations and publishes every batch.
func (p *kvPublisher) flush() {
	p.mu.Lock()
	var resync []int
	for i := range p.ranks {
		if p.ranks[i].resync {
			resync = append(resync, p.w.cfg.DPStart+i)
		}
	}
	p.mu.Unlock()
	for _, rank := range resync {
		if p.cfg.Resync != nil {
			p.cfg.Resync(rank)
		} else {
			_ = p.w.CacheResync(rank, nil)
		}
	}
	var evs []*wire.KVEvent
	p.mu.Lock()
	for i := range p.ranks {
		r := &p.ranks[i]
		for _, b := range r.batches {
			if b.empty() {
				continue
			}
			r.lastID++
			evs = append(evs, &wire.KVEvent{Instance: p.w.instance, ID: r.lastID, Rank: int32(p.w.cfg.DPStart + i),
				Cleared: b.cleared, Removed: b.removed, Stored: b.stored})
		}
		clear(r.batches)
		r.batches, r.ops = r.batches[:0], 0
	}
	p.mu.Unlock()
	for _, ev := range evs {
		p.publish(ev)
	}
}

// publish sends one event asynchronously; a publish refused at once
// resynchronises the rank.
func (p *kvPublisher) publish(ev *wire.KVEvent) {
	body, err := wire.EncodeKVEvent(ev)
	if err != nil {
		p.w.log.Error().Err(err).Msg("encode KV cache event")
		return
	}
	m := nats.NewMsg(p.subj)
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%s.%d.%d", p.w.cfg.ID, ev.Instance, ev.Rank, ev.ID))
	m.Data = body
	if _, err := p.js.PublishMsgAsync(m); err != nil {
		p.failed(p.js, m, err)
		return
	}
	p.mu.Lock()
	p.stats.Sent++
	p.mu.Unlock()
}

// stop unsubscribes from resynchronisation requests, publishes what is
// gathered and waits at most wait for JetStream's acknowledgements.
func (p *kvPublisher) stop(wait time.Duration) {
	p.mu.Lock()
	started, sub := p.started, p.sub
	p.mu.Unlock()
	if !started {
		return
	}
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		p.w.log.Warn().Err(err).Msg("unsubscribe KV resync requests")
	}
	close(p.quit)
	<-p.done
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(wait):
		p.w.log.Warn().Int("pending", p.js.PublishAsyncPending()).Msg("stopped with KV cache events unacknowledged")
	}
}
