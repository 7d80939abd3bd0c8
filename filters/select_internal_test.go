package filters

import (
	"math"
	"testing"

	"fairdispatch/request"
	"fairdispatch/workers"
)

// TestCostFormula checks the cost model of docs/design.md, Worker selection against values worked out
// by hand, one rank at a time.
func TestCostFormula(t *testing.T) {
	type rank struct {
		prefill, decode, reqs uint64
		booked                uint64 // one booking of this prefill cost, when > 0
	}
	tests := []struct {
		name    string
		sc      Scoring
		taints  []string
		ranks   []rank
		isl     uint64
		route   *request.Route
		want    []float64 // per rank
		comment string
	}{
		{
			name:  "defaults, overlap credit, booking",
			sc:    DefaultScoring(),
			ranks: []rank{{prefill: 100, decode: 7, reqs: 3, booked: 28}},
			isl:   100,
			route: &request.Route{Overlap: []request.Overlap{{Worker: "other", Tokens: 99}, {Worker: "w", Tokens: 32}}},
			// raw (128+100)/16 = 14.25; credit 32/16 = 2; 12.25 + 7 + ceil(100/16)=7 = 26.25
			want: []float64{26.25},
		},
		{
			name:  "credit larger than raw prefill clamps at 0; request weight",
			sc:    Scoring{BlockSize: 10, OverlapCredit: 2, PrefillScale: 0.5, DecodeRequestWeight: 1.5},
			ranks: []rank{{prefill: 0, decode: 4, reqs: 2, booked: 5}},
			isl:   25,
			route: &request.Route{Overlap: []request.Overlap{{Worker: "w", Tokens: 100}}},
			// raw (5+25)/10 = 3; credit 2*100/10 = 20; max(0, -17) = 0; + 4 + ceil(2.5)=3 + 1.5*(2+1) = 11.5
			want: []float64{11.5},
		},
		{
			name:  "prefill scale and no overlap",
			sc:    Scoring{BlockSize: 16, OverlapCredit: 1, PrefillScale: 3},
			ranks: []rank{{prefill: 40}},
			isl:   17,
			// raw (40+17)/16 = 3.5625 * 3 = 10.6875; + ceil(17/16)=2 = 12.6875
			want: []float64{12.6875},
		},
		{
			name:  "request blocks: isl 16 is one block, 0 is none",
			sc:    DefaultScoring(),
			ranks: []rank{{prefill: 0}},
			isl:   16,
			want:  []float64{2}, // 16/16 + 1
		},
		{
			name:  "isl 0",
			sc:    DefaultScoring(),
			ranks: []rank{{prefill: 32, decode: 1}},
			isl:   0,
			want:  []float64{3}, // 32/16 + 1 + 0
		},
		{
			name:  "each rank on its own load",
			sc:    DefaultScoring(),
			ranks: []rank{{prefill: 16}, {prefill: 160, decode: 2}, {}},
			isl:   32,
			want:  []float64{1 + 2 + 2, 12 + 2 + 2, 2 + 2},
		},
		{
			name:   "preferred taints multiply by exp(-tanh(sum))",
			sc:     DefaultScoring(),
			taints: []string{"a", "b"},
			ranks:  []rank{{prefill: 64}},
			isl:    64,
			route: &request.Route{Preferred: []request.Taint{
				{Name: "a", Weight: 0.5}, {Name: "b", Weight: 0.25}, {Name: "c", Weight: 10}}},
			// base (64+64)/16 + 4 = 12; sum 0.75 (c not carried)
			want: []float64{12 * math.Exp(-math.Tanh(0.75))},
		},
		{
			name:   "negative weight steers away",
			sc:     DefaultScoring(),
			taints: []string{"slow"},
			ranks:  []rank{{prefill: 64}},
			isl:    64,
			route:  &request.Route{Preferred: []request.Taint{{Name: "slow", Weight: -2}}},
			want:   []float64{12 * math.Exp(math.Tanh(2))},
		},
		{
			name:   "weights cancel out",
			sc:     DefaultScoring(),
			taints: []string{"a", "b"},
			ranks:  []rank{{prefill: 64}},
			isl:    64,
			route:  &request.Route{Preferred: []request.Taint{{Name: "a", Weight: 3}, {Name: "b", Weight: -3}}},
			want:   []float64{12},
		},
		{
			name:   "no preferred taint carried",
			sc:     DefaultScoring(),
			taints: []string{"x"},
			ranks:  []rank{{prefill: 64}},
			isl:    64,
			route:  &request.Route{Preferred: []request.Taint{{Name: "a", Weight: 3}}},
			want:   []float64{12}, // exp(-tanh(0)) = 1
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := workers.New()
			rep := workers.Report{WorkerID: "w", DPStart: 3, DPSize: uint32(len(tt.ranks)), TTLms: 3000,
				Taints: tt.taints, HasSeenSeq: true}
			for i, rk := range tt.ranks {
				rep.Ranks = append(rep.Ranks, workers.RankLoad{Rank: 3 + uint32(i),
					ActivePrefillTokens: rk.prefill, ActiveDecodeBlocks: rk.decode, ActiveRequests: rk.reqs})
			}
			w, _, _ := reg.Apply(0, rep)
			for i, rk := range tt.ranks {
				if rk.booked > 0 {
					reg.Book(0, w, 3+int32(i), rk.booked)
				}
			}
			s := &Selector{Scoring: tt.sc}
			s.addRanks(w, &request.Snapshot{ISL: tt.isl, Route: tt.route})
			if len(s.cands) != len(tt.want) {
				t.Fatalf("candidates: got %d, want %d", len(s.cands), len(tt.want))
			}
			for i, c := range s.cands {
				if c.w != w || c.rank != 3+int32(i) {
					t.Errorf("candidate %d: got %s rank %d, want w rank %d", i, c.w.ID, c.rank, 3+i)
				}
				if math.Abs(c.cost-tt.want[i]) > 1e-9 {
					t.Errorf("candidate %d cost: got %v, want %v", i, c.cost, tt.want[i])
				}
			}
		})
	}
}
