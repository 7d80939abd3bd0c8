package lanes

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"fairdispatch/request"
)

// refBucket is a token bucket written out plainly from docs/design.md,
// Token budgets: the level at t is min(burst, level + rate × (t - at)), a
// charge moves it, and it never goes below minLevel.
type refBucket struct {
	rate, burst, level float64
	at                 int64
}

func (b *refBucket) levelAt(now int64) float64 {
	if now <= b.at {
		return b.level
	}
	return math.Min(b.burst, b.level+b.rate*float64(now-b.at)/1e9)
}

func (b *refBucket) charge(now int64, delta float64) {
	if now > b.at {
		b.level, b.at = b.levelAt(now), now
	}
	b.level = math.Max(minLevel, math.Min(b.burst, b.level-delta))
}

// TestBudgetModel runs random pushes, removals, dispatches (a first pass,
// then the work-conserving second pass when the first finds nothing),
// settlement corrections, settlements, prunes and time steps against plain
// buckets, every request dispatchable, and checks: every key's level is the
// model's; a dispatch in the first pass finds its key's level covering its
// cost (capped by the burst) and takes it; a second-pass dispatch is of a
// work-conserving key over budget and takes nothing; a first pass that finds
// nothing leaves every backlogged key throttled, with a NextReady ahead.
func TestBudgetModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"a", "b", "c", "d"}
		budgets := map[string]*Budget{}
		for _, n := range names {
			if rapid.IntRange(0, 3).Draw(t, "unlimited") == 0 {
				budgets[n] = nil
				continue
			}
			budgets[n] = &Budget{
				Rate:           float64(rapid.IntRange(100, 10000).Draw(t, "rate")),
				Burst:          rapid.Uint64Range(1, 1000).Draw(t, "burst"),
				WorkConserving: rapid.Bool().Draw(t, "wc"),
			}
		}
		now := t0
		c := NewKeyed(always{}, KeyConfig{Budgets: budgets})
		c.SetNow(now)
		ref := map[string]*refBucket{}
		model := func(n string) *refBucket {
			if ref[n] == nil {
				bg := budgets[n]
				ref[n] = &refBucket{rate: bg.Rate, burst: float64(bg.Burst), level: float64(bg.Burst), at: now}
			}
			return ref[n]
		}
		var (
			seq    uint64
			queued []*request.Snapshot
			owed   []string
		)
		backlog := func() map[string]int {
			m := map[string]int{}
			for _, r := range queued {
				m[r.Key]++
			}
			return m
		}
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				seq++
				n := rapid.SampledFrom(names).Draw(t, "key")
				r := kr(fmt.Sprint(seq), n, seq, rapid.Uint64Range(1, 1500).Draw(t, "cost"))
				c.Push(r)
				queued = append(queued, r)
			},
			"time": func(t *rapid.T) {
				now += rapid.Int64Range(0, 3e8).Draw(t, "dt")
				c.SetNow(now)
			},
			"remove": func(t *rapid.T) {
				c.Remove(drawOut(t, &queued, "nothing queued"))
			},
			"dispatch": func(t *rapid.T) {
				conserve := rapid.Bool().Draw(t, "conserve")
				_, ok := c.Candidate()
				second := !ok
				if !ok {
					bl := backlog()
					thr := 0
					for n := range bl {
						if budgets[n] == nil {
							t.Fatalf("first pass found nothing, unlimited key %s backlogged", n)
						}
						if _, _, _, th, _ := c.BudgetLevel(now, n); !th {
							t.Fatalf("first pass found nothing, key %s backlogged and not throttled", n)
						}
						thr++
					}
					if c.Throttled() < thr || (thr > 0 && c.NextReady() <= now) {
						t.Fatalf("%d throttled, NextReady t0%+d at t0%+d; want %d, ahead", c.Throttled(), c.NextReady()-t0, now-t0, thr)
					}
					if !conserve {
						t.Skip("nothing within budget")
					}
					c.SetConserve(true)
					_, ok = c.Candidate()
					c.SetConserve(false)
					if !ok {
						t.Skip("nothing at all")
					}
				}
				r := c.cand
				c.Pop()
				if c.Last() != r {
					t.Fatalf("got Last %s, want the candidate %s", c.Last().ID, r.ID)
				}
				queued = slices.DeleteFunc(queued, func(x *request.Snapshot) bool { return x == r })
				owed = append(owed, r.Key)
				bg := budgets[r.Key]
				switch {
				case c.LastFree() && (!second || bg == nil || !bg.WorkConserving):
					t.Fatalf("%s of key %s dispatched free outside the second pass or over a budget that does not conserve", r.ID, r.Key)
				case c.LastFree():
					if l := model(r.Key).levelAt(now); l >= math.Min(float64(r.Cost), float64(bg.Burst)) {
						t.Fatalf("%s dispatched free with level %v covering its cost %d", r.ID, l, r.Cost)
					}
				case second:
					t.Fatalf("%s of key %s dispatched by the second pass, charged", r.ID, r.Key)
				case bg != nil:
					m := model(r.Key)
					if l := m.levelAt(now); l < math.Min(float64(r.Cost), float64(bg.Burst)) {
						t.Fatalf("%s of key %s (cost %d, burst %d) dispatched with level %v", r.ID, r.Key, r.Cost, bg.Burst, l)
					}
					m.charge(now, float64(r.Cost))
				}
			},
			"correct": func(t *rapid.T) {
				n := rapid.SampledFrom(names).Draw(t, "key")
				delta := rapid.Int64Range(-1000, 1000).Draw(t, "delta")
				if !c.ChargeBudget(now, n, delta) {
					if budgets[n] != nil && model(n).levelAt(now) < float64(budgets[n].Burst) {
						t.Fatalf("ChargeBudget(%s) refused with a level %v under the burst", n, model(n).levelAt(now))
					}
					return
				}
				model(n).charge(now, float64(delta))
			},
			"settle": func(t *rapid.T) {
				c.Settle(drawOut(t, &owed, "nothing owed"), 0)
			},
			"prune": func(t *rapid.T) { c.PruneBudgets(now) },
			"": func(t *rapid.T) {
				for _, n := range names {
					l, _, _, _, ok := c.BudgetLevel(now, n)
					if ok != (budgets[n] != nil) {
						t.Fatalf("key %s: BudgetLevel ok %v with budget %v", n, ok, budgets[n])
					}
					if ok && math.Abs(l-model(n).levelAt(now)) > 1e-6 {
						t.Fatalf("key %s: got level %v, model %v", n, l, model(n).levelAt(now))
					}
				}
				if c.Len() != len(queued) {
					t.Fatalf("got Len %d, want %d", c.Len(), len(queued))
				}
				if err := extInvariants(c); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}
