package mockworker

import (
	"fmt"
	"time"

	"fairdispatch/mockworker/batching"
	"fairdispatch/wire"
	"fairdispatch/workerkit"
)

// The batched engine (Config.Model): each rank is a batching.Engine, a
// continuously batched engine with chunked prefill whose KV block pool is
// also its prefix cache (mockworker/batching). This file wires it into the
// Worker: requests in, finished sequences out as jobs, loads and cache
// events to the helper. Everything here runs under m.mu.

// batchedRank is one rank's engine and its cache events.
type batchedRank struct {
	eng *batching.Engine
}

// cacheEvents tells the helper of one rank's cache changes (device tier).
type cacheEvents struct {
	m    *Worker
	rank int
}

func (c cacheEvents) Stored(h []uint64)  { _ = c.m.helper.CacheStored(c.rank, wire.Device, h) }
func (c cacheEvents) Removed(h []uint64) { _ = c.m.helper.CacheRemoved(c.rank, wire.Device, h) }

// newBatched builds the ranks' engines; the helper must exist.
func (m *Worker) newBatched() error {
	for i := range m.helper.Config().DPSize {
		e, err := batching.New(*m.cfg.Model, cacheEvents{m: m, rank: m.cfg.DPStart + i})
		if err != nil {
			return err
		}
		m.bat = append(m.bat, batchedRank{eng: e})
	}
	m.batJobs = map[*workerkit.Request]*job{}
	m.eng.alt = batchedTiming{m}
	return m.helper.EnableKVEvents(workerkit.KVConfig{Resync: m.resyncBatched})
}

// offerBatched gives j's request to its rank's engine at now.
func (m *Worker) offerBatched(now time.Time, r *workerkit.Request, j *job) error {
	var hashes []uint64
	if v := workerkit.HeaderValue(r.Header, wire.HeaderBlockHashes); v != "" {
		if h, err := wire.DecodeHashes(nil, v); err == nil {
			hashes = h
		}
	}
	isl := int(r.ISL)
	if isl < 1 {
		isl = int(max(1, j.uncached))
	}
	s, err := m.bat[j.rank-m.cfg.DPStart].eng.Add(now, &batching.Request{ID: r.RequestID, ISL: isl, Output: j.out, Hashes: hashes, Tag: j})
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	j.receivedAt, j.seq, j.phase = now, s, phaseWaiting
	m.batJobs[r] = j
	return nil
}

// advanceBatched runs every rank's engine to now and returns the jobs
// finished, with their timings and cache hits filled in.
func (m *Worker) advanceBatched(now time.Time) []*job {
	var done []*job
	for _, br := range m.bat {
		for _, ev := range br.eng.Advance(now) {
			if ev.Kind != batching.Finished {
				continue
			}
			s := ev.Seq
			j := s.Req.Tag.(*job)
			syncJob(j)
			delete(m.batJobs, j.req)
			if len(s.Req.Hashes) > 0 {
				m.cacheStats.Requests++
				m.cacheStats.PromptTokens += uint64(s.Req.ISL)
				m.cacheStats.CachedTokens += j.cached
			}
			done = append(done, j)
		}
	}
	return done
}

// nextBatched returns the earliest next event of the engines.
func (m *Worker) nextBatched() (at time.Time, ok bool) {
	for _, br := range m.bat {
		if t, k := br.eng.Next(); k && (!ok || t.Before(at)) {
			at, ok = t, true
		}
	}
	return at, ok
}

// loadBatched is rank's load as the helper reports it.
func (m *Worker) loadBatched(rank int) workerkit.RankLoad {
	l := m.bat[rank-m.cfg.DPStart].eng.Load()
	return workerkit.RankLoad{ActivePrefillTokens: l.ActivePrefillTokens, ActiveDecodeBlocks: l.ActiveDecodeBlocks,
		KVUsedBlocks: l.KVUsedBlocks, ActiveRequests: l.ActiveRequests}
}

// resyncBatched is the helper's KVConfig.Resync with the batched engine.
func (m *Worker) resyncBatched(rank int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var held [wire.NumTiers][]uint64
	held[wire.Device] = m.bat[rank-m.cfg.DPStart].eng.CachedBlocks()
	if err := m.helper.CacheResync(rank, &held); err != nil {
		m.log.Error().Err(err).Int("dp_rank", rank).Msg("KV cache resync")
	}
}

// syncJob copies what the batched engine knows of j's sequence into the
// job's fields, which the completion record and the cancellation read.
func syncJob(j *job) {
	s := j.seq
	j.startedAt, j.finishAt = s.Started, s.Finished
	j.uncached, j.cached = uint64(s.PrefillTokens), uint64(s.CachedTokens)
	switch {
	case s.Started.IsZero():
		j.phase = phaseWaiting
	case s.FirstToken.IsZero():
		j.phase, j.prefillEnd = phasePrefill, time.Time{}.Add(1<<63-1)
	default:
		j.phase, j.prefillEnd = phaseDecode, s.FirstToken
	}
}

// batchedTiming answers engine_hooks.go's questions for the batched
// engines. m.mu is held.
type batchedTiming struct{ m *Worker }

// tokenAt is known for the next token only, and only while it is being
// made: at the end of the step in progress when the sequence is in it.
func (b batchedTiming) tokenAt(j *job, k int) (time.Time, bool) {
	s := j.seq
	if k <= s.Generated {
		return time.Time{}, false // already out; not asked
	}
	if at, ok := b.m.bat[j.rank-b.m.cfg.DPStart].eng.NextToken(s); ok && k == s.Generated+1 {
		return at, true
	}
	return time.Time{}, false
}

func (b batchedTiming) produced(j *job, _ time.Time) int { return j.seq.Generated }

func (b batchedTiming) remove(j *job, now time.Time) bool {
	ok := b.m.bat[j.rank-b.m.cfg.DPStart].eng.Remove(now, j.seq)
	syncJob(j)
	if ok {
		delete(b.m.batJobs, j.req)
	}
	return ok
}

// EngineStats returns the batched engines' counters summed over the ranks
// (zero without Config.Model).
func (m *Worker) EngineStats() batching.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out batching.Stats
	for _, br := range m.bat {
		s := br.eng.Stats()
		out.Steps += s.Steps
		out.Evictions += s.Evictions
		out.Busy += s.Busy
	}
	return out
}
