package filters_test

import (
	"testing"

	"fairdispatch/request"
	"fairdispatch/workers"
)

// spec describes a worker for the tests: its ranks' prefill loads (rank i is
// Start+i) and a few settings.
type spec struct {
	id       string
	start    uint32
	prefill  []uint64 // one per rank; nil: one idle rank
	decode   []uint64 // active_decode_blocks per rank, optional
	kv       []uint64 // kv_used_blocks per rank, optional
	reqs     []uint64 // active_requests per rank, optional
	batched  uint64
	totalKV  uint64
	taints   []string
	draining bool
}

func at(s []uint64, i int) uint64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// report turns a spec into a valid report that counts no dispatch (seen_seq 0),
// so bookings made after it stay on top of it.
func (s spec) report() workers.Report {
	n := max(len(s.prefill), 1)
	r := workers.Report{WorkerID: s.id, DPStart: s.start, DPSize: uint32(n), TTLms: 3000,
		MaxBatched: s.batched, TotalKV: s.totalKV, Taints: s.taints, Draining: s.draining,
		HasSeenSeq: true}
	for i := range n {
		r.Ranks = append(r.Ranks, workers.RankLoad{Rank: s.start + uint32(i),
			ActivePrefillTokens: at(s.prefill, i), ActiveDecodeBlocks: at(s.decode, i),
			KVUsedBlocks: at(s.kv, i), ActiveRequests: at(s.reqs, i)})
	}
	return r
}

// registry returns a registry holding the given workers.
func registry(t testing.TB, specs ...spec) *workers.Registry {
	t.Helper()
	reg := workers.New()
	for _, s := range specs {
		if _, _, ok := reg.Apply(0, s.report()); !ok {
			t.Fatalf("Apply(%s): refused", s.id)
		}
	}
	return reg
}

// booked is the registry of the one worker s, named w, with booked prefill
// tokens booked on its rank 0, and that worker.
func booked(t testing.TB, s spec, booked uint64) (*workers.Registry, *workers.Worker) {
	t.Helper()
	s.id = "w"
	reg := registry(t, s)
	w := reg.Get("w")
	if booked > 0 {
		reg.Book(0, w, 0, booked)
	}
	return reg, w
}

func u64(v uint64) *uint64   { return &v }
func f64(v float64) *float64 { return &v }
func pin(id string, rank int32) request.Target {
	return request.Target{Worker: id, Rank: rank}
}
