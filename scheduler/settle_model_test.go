package scheduler

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/request"
)

// settleModel is the settlement memory's specification, kept plainly: every
// dispatch in dispatch order, and each worker's current run of sequence
// numbers. A worker whose sequence does not grow starts a new run, and its
// earlier dispatches are forgotten, their keys released.
type settleModel struct {
	recs     []*modelRec            // dispatch order, expired ones removed
	current  map[string][]*modelRec // per worker: the records of its current run
	released []string               // "class/key", in order
	window   int64
	max      int
}

type modelRec struct {
	worker                 string
	seq                    uint64
	id, key                string
	class                  int
	at                     int64
	owes, settled, dropped bool
}

func (m *settleModel) drop(r *modelRec, release bool) {
	if r.dropped {
		return
	}
	r.dropped = true
	if release && r.owes && !r.settled {
		m.released = append(m.released, fmt.Sprint(r.class, "/", r.key))
	}
}

func (m *settleModel) record(now int64, worker string, seq uint64, id, key string, class int, owes bool) {
	run := m.current[worker]
	if len(run) > 0 && run[len(run)-1].seq >= seq {
		for _, r := range run {
			m.drop(r, true)
		}
		run = nil
	}
	r := &modelRec{worker: worker, seq: seq, id: id, key: key, class: class, at: now, owes: owes}
	m.current[worker] = append(run, r)
	m.recs = append(m.recs, r)
}

func (m *settleModel) find(worker string, seq uint64) *modelRec {
	for _, r := range m.current[worker] {
		if r.seq == seq && !r.dropped {
			return r
		}
	}
	return nil
}

func (m *settleModel) expire(now int64) {
	for len(m.recs) > 0 && (now-m.recs[0].at >= m.window || len(m.recs) > m.max) {
		r := m.recs[0]
		m.recs = m.recs[1:]
		m.drop(r, true)
		if run := m.current[r.worker]; len(run) > 0 && run[0] == r {
			m.current[r.worker] = run[1:]
		}
	}
}

func (m *settleModel) live() int {
	n := 0
	for _, r := range m.recs {
		if !r.dropped {
			n++
		}
	}
	return n
}

// TestSettlementsMatchTheModel drives the settlement memory and its model
// with the same random dispatches (per worker by growing sequence, now and
// then starting over), hand-backs, completion records, policy changes and
// expiries, and checks that they find the same dispatches, release the same
// keys in the same order, and count the same.
func TestSettlementsMatchTheModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var released []string
		var st settlements
		window := rapid.Int64Range(5, 50).Draw(t, "window")
		max := rapid.IntRange(1, 40).Draw(t, "max")
		st.init(Config{SettleWindow: window, MaxUnsettled: max}, func(c int, k string) {
			released = append(released, fmt.Sprint(c, "/", k))
		})
		m := &settleModel{current: map[string][]*modelRec{}, window: window, max: max}
		workers := []string{"w1", "w2", "w3"}
		next := map[string]uint64{}
		var now int64
		n := 0
		t.Repeat(map[string]func(*rapid.T){
			"dispatch": func(t *rapid.T) {
				w := rapid.SampledFrom(workers).Draw(t, "worker")
				if rapid.IntRange(0, 9).Draw(t, "restart") == 0 {
					next[w] = rapid.Uint64Range(0, next[w]).Draw(t, "from") // numbering starts over
				}
				next[w] += rapid.Uint64Range(1, 3).Draw(t, "step")
				n++
				id, key := fmt.Sprint("r", n), rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
				class := rapid.IntRange(0, 2).Draw(t, "class")
				owes := rapid.Bool().Draw(t, "owes")
				st.record(now, Decision{Worker: w, Seq: next[w], Req: &request.Snapshot{ID: id, Key: key, Class: class}}, 1, owes)
				m.record(now, w, next[w], id, key, class, owes)
			},
			"forget": func(t *rapid.T) {
				w := rapid.SampledFrom(workers).Draw(t, "worker")
				seq := rapid.Uint64Range(0, next[w]+1).Draw(t, "seq")
				release := rapid.Bool().Draw(t, "release")
				st.forget(w, seq, release)
				if r := m.find(w, seq); r != nil {
					m.drop(r, release)
				}
			},
			"settle": func(t *rapid.T) {
				w := rapid.SampledFrom(workers).Draw(t, "worker")
				seq := rapid.Uint64Range(0, next[w]+1).Draw(t, "seq")
				got, want := st.find(w, seq), m.find(w, seq)
				if (got == nil) != (want == nil) {
					t.Fatalf("find(%s, %d): got %v, model %v", w, seq, got, want)
				}
				if got == nil {
					return
				}
				if got.id != want.id || got.key != want.key || got.class != want.class || got.settled != want.settled || got.owes != want.owes {
					t.Fatalf("find(%s, %d): got %+v, model %+v", w, seq, *got, *want)
				}
				got.settled, want.settled = true, true
			},
			"reclass": func(t *rapid.T) {
				to := []int{rapid.IntRange(-1, 2).Draw(t, "0"), rapid.IntRange(-1, 2).Draw(t, "1"), rapid.IntRange(-1, 2).Draw(t, "2")}
				st.reclass(to)
				for _, r := range m.recs {
					if r.dropped || r.class < 0 {
						continue
					}
					if r.class = to[r.class]; r.class < 0 {
						r.owes = false
					}
				}
			},
			"tick": func(t *rapid.T) {
				now += rapid.Int64Range(0, 20).Draw(t, "dt")
				st.expire(now)
				m.expire(now)
			},
			"": func(t *rapid.T) {
				if st.live != m.live() {
					t.Fatalf("live: got %d, model %d", st.live, m.live())
				}
				if !slices.Equal(released, m.released) {
					t.Fatalf("released: got %v, model %v", released, m.released)
				}
			},
		})
	})
}
