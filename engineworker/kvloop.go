package engineworker

import (
	"context"
	"errors"
	"time"

	"fairdispatch/wire"
)

// replayTimeout bounds one replay.
const replayTimeout = 2 * time.Second

// cacheSink takes a rank's cache changes in fairdispatch's terms: the
// helper (workerkit's Cache calls), or a test's recorder.
type cacheSink interface {
	CacheStored(rank int, tier wire.Tier, hashes []uint64) error
	CacheRemoved(rank int, tier wire.Tier, hashes []uint64) error
	CacheCleared(rank int, tiers wire.Tiers) error
	CacheResync(rank int, held *[wire.NumTiers][]uint64) error
}

// kvRank is one rank's view of the engine's event stream.
type kvRank struct {
	rank   int // the engine's rank (DPStart + index)
	idx    int
	last   int64 // last seq applied, -1 none
	replay string
	// complete: every batch of this engine process since seq 0 was applied,
	// so a parent the chain does not know means events were lost.
	complete bool
	// dupFrom..dupTo were applied from a replay after a (re)connection: live
	// copies of them still queued are duplicates, not a restart. dupFrom -1: none.
	dupFrom, dupTo int64
}

// kvLoop follows rank idx's events until ctx ends.
func (w *Worker) kvLoop(ctx context.Context, idx int) {
	rank := w.cfg.Worker.DPStart + idx
	ep, err := OffsetEndpoint(w.cfg.KVEndpoint, rank)
	if err != nil {
		w.log.Error().Err(err).Msg("kv endpoint")
		return
	}
	rs := &kvRank{rank: rank, idx: idx, last: -1, dupFrom: -1}
	if rs.replay, err = OffsetEndpoint(w.cfg.ReplayEndpoint, rank); err != nil {
		w.log.Error().Err(err).Msg("kv replay endpoint")
		return
	}
	msgs := make(chan zmqMsg, 1024)
	go subscribe(ctx, ep, w.cfg.KVTopic, msgs, func(err error) {
		if errors.Is(err, ErrLayout) {
			w.count(func(s *Stats) { s.LayoutErrors++ })
		}
		w.log.Warn().Err(err).Int("dp_rank", rank).Msg("kv events")
	})
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-msgs:
			if m.seq == seqConnected {
				w.caughtUp(ctx, rs)
				continue
			}
			w.onBatch(ctx, rs, m)
		case <-w.gone[idx]:
			// The engine process is gone (healthLoop): so is its cache. Its
			// successor's first batch has seq 0 and starts a complete chain.
			w.log.Info().Int("dp_rank", rank).Msg("engine gone: clearing the rank")
			w.reset(rs)
			rs.last, rs.complete = -1, false
		}
	}
}

// caughtUp applies, after the subscription (re)connected, what the engine
// published while it was not connected: everything its replay socket holds
// after the last batch applied (from 0 after the engine went away). Without
// a replay socket the next batch shows the gap.
func (w *Worker) caughtUp(ctx context.Context, rs *kvRank) {
	if rs.replay == "" {
		return
	}
	got, err := replay(ctx, rs.replay, rs.last+1, -1, replayTimeout)
	if err != nil {
		w.log.Debug().Err(err).Int("dp_rank", rs.rank).Msg("kv replay after connecting")
		return
	}
	if len(got) == 0 {
		return
	}
	w.count(func(s *Stats) { s.Replays++ })
	for _, g := range got {
		w.onBatch(ctx, rs, g)
	}
	rs.dupFrom, rs.dupTo = got[0].seq, rs.last
}

// onBatch applies one live batch, healing a gap first: by replay when the
// engine has a replay socket and still holds the range, else by a reset
// (every tier cleared: docs/protocol.md, Resynchronisation).
func (w *Worker) onBatch(ctx context.Context, rs *kvRank, m zmqMsg) {
	if rs.dupFrom >= 0 {
		if m.seq >= rs.dupFrom && m.seq <= rs.dupTo {
			return // applied from the replay already
		}
		rs.dupFrom = -1
	}
	switch {
	case rs.last >= 0 && m.seq <= rs.last:
		// The sequence went back: a new engine process, an empty cache.
		w.log.Info().Int("dp_rank", rs.rank).Int64("seq", m.seq).Int64("last", rs.last).Msg("engine restarted: clearing the rank")
		w.reset(rs)
		rs.complete = m.seq == 0
		if m.seq > 0 {
			w.fill(ctx, rs, 0, m.seq-1)
		}
	case rs.last < 0:
		rs.complete = m.seq == 0
		if m.seq > 0 {
			w.fill(ctx, rs, 0, m.seq-1) // started late: learn what the engine holds
		}
	case m.seq > rs.last+1:
		w.count(func(s *Stats) { s.Gaps++ })
		w.fill(ctx, rs, rs.last+1, m.seq-1)
	}
	w.apply(rs, m)
}

// fill replays [from, to]; when it cannot, the rank is reset unless from is
// 0 (a late start: nothing applied that could be wrong).
func (w *Worker) fill(ctx context.Context, rs *kvRank, from, to int64) {
	if rs.replay != "" {
		got, err := replay(ctx, rs.replay, from, to, replayTimeout)
		if err == nil {
			w.count(func(s *Stats) { s.Replays++ })
			for _, g := range got {
				w.apply(rs, g)
			}
			if from == 0 {
				rs.complete = true
			}
			return
		}
		w.log.Warn().Err(err).Int("dp_rank", rs.rank).Int64("from", from).Int64("to", to).Msg("kv replay failed")
	}
	if from > 0 {
		w.reset(rs)
	}
	rs.complete = false
}

// reset clears the rank: the chain forgets everything and the helper
// publishes a cleared of every tier.
func (w *Worker) reset(rs *kvRank) {
	w.count(func(s *Stats) { s.Resets++ })
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	w.chains[rs.idx].Reset()
	_ = w.kv.CacheCleared(rs.rank, wire.AllTiers)
}

func (w *Worker) apply(rs *kvRank, m zmqMsg) {
	rs.last = m.seq
	b, err := DecodeBatch(m.payload)
	if err != nil {
		// A batch we cannot read may hold removals: the rank is reset.
		w.count(func(s *Stats) { s.LayoutErrors++ })
		w.log.Error().Err(err).Int("dp_rank", rs.rank).Int64("seq", m.seq).Msg("kv batch refused")
		w.reset(rs)
		rs.complete = false
		return
	}
	w.count(func(s *Stats) { s.Batches++ })
	if b.Rank >= 0 && b.Rank != rs.rank {
		w.log.Warn().Int("dp_rank", rs.rank).Int("batch_rank", b.Rank).Msg("kv batch of another rank ignored")
		return
	}
	w.kvMu.Lock()
	ch := w.chains[rs.idx]
	var changes []Change
	resetNeeded := false
	for _, ev := range b.Events {
		var err error
		changes, err = ch.Apply(ev, changes)
		switch {
		case err == nil:
		case errors.Is(err, ErrUnknownParent):
			w.count(func(s *Stats) { s.UnknownParents++ })
			if rs.complete {
				resetNeeded = true // events were lost without a gap in seq
			}
		case errors.Is(err, ErrCollision):
			var first bool
			w.count(func(s *Stats) { s.Collisions++; first = s.Collisions == 1 })
			if first {
				w.log.Warn().Err(err).Int("dp_rank", rs.rank).
					Msg("the engine's block hashes do not chain its prefix: such blocks are left out of the index (docs/deployment.md, SGLang)")
			}
		default:
			w.log.Warn().Err(err).Int("dp_rank", rs.rank).Msg("kv event")
			resetNeeded = true
		}
	}
	for _, c := range changes {
		switch c.Op {
		case OpStored:
			_ = w.kv.CacheStored(rs.rank, c.Tier, c.Hashes)
		case OpRemoved:
			_ = w.kv.CacheRemoved(rs.rank, c.Tier, c.Hashes)
		case OpCleared:
			_ = w.kv.CacheCleared(rs.rank, wire.AllTiers)
		}
	}
	w.kvMu.Unlock()
	if resetNeeded {
		w.reset(rs)
		rs.complete = false
	}
}

// resync answers the helper's resynchronisation of a rank with everything
// the chain holds, under the lock of the Cache calls.
func (w *Worker) resync(rank int) {
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	held := w.chains[rank-w.cfg.Worker.DPStart].Held()
	_ = w.kv.CacheResync(rank, &held)
}
