package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"fairdispatch/configs"
	"fairdispatch/filters"
	"fairdispatch/request"
	"fairdispatch/workers"
	"pgregory.net/rapid"
)

const edfYAML = `default_policy_family: c
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: c, policy_family: c, cache_bucket: all, quantum: 100, prefill_busy_threshold: 0, queue_policy: edf,
     deadline_ms: 60000, key_deadlines_ms: {t: 20000}}
`

// TestEDFOrderProperty is acceptance 2's property (docs/design.md,
// Deadlines): in an edf class, a dispatch never takes a request whose
// effective deadline (the tightest of its own, its key's and its class's)
// is later than another queued request's of the same key and lane while
// both are dispatchable; no request is lost or dispatched twice. The model
// is a plain list of the queued requests with their deadlines computed
// apart from the scheduler.
func TestEDFOrderProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pol, err := configs.Parse("edf.yaml", []byte(edfYAML))
		if err != nil {
			rt.Fatal(err)
		}
		now := int64(1e18)
		s := New(Config{Policy: pol, Scoring: filters.DefaultScoring(), Rand: rand.New(rand.NewPCG(1, 2))}, now)
		busy := false
		report := func() {
			var p, n uint64
			if busy {
				p, n = 1, 1
			}
			s.Report(now, workers.Report{WorkerID: "w", DPSize: 1, TTLms: 600000, Instance: "i", SeenSeq: s.seq, HasSeenSeq: true,
				Ranks: []workers.RankLoad{{ActivePrefillTokens: p, ActiveRequests: n}}})
		}
		busy = true
		report()
		type queued struct {
			key string
			due int64
		}
		model := map[string]queued{} // queued request id -> its key and effective deadline
		id := 0
		check := func(d Decision) {
			if d.Kind != Dispatch {
				return
			}
			q, ok := model[d.Req.ID]
			if !ok {
				rt.Fatalf("dispatched %s, not queued (lost or twice)", d.Req.ID)
			}
			for other, o := range model {
				if o.key == q.key && o.due < q.due {
					rt.Fatalf("dispatched %s due %d before %s due %d", d.Req.ID, q.due, other, o.due)
				}
			}
			delete(model, d.Req.ID)
			busy = true
			report()
		}
		rt.Repeat(map[string]func(*rapid.T){
			"arrive": func(rt *rapid.T) {
				id++
				key := rapid.SampledFrom([]string{"", "t"}).Draw(rt, "key")
				a := &request.Arrival{ID: fmt.Sprint(id), Token: "c", ISL: 10, Published: now, Key: key,
					Strict: uint32(rapid.IntRange(0, 2).Draw(rt, "tier"))}
				due := now + 60000*1e6
				if key == "t" {
					due = now + 20000*1e6
				}
				if rapid.Bool().Draw(rt, "own") {
					a.HasDeadline, a.DeadlineMs = true, uint64(rapid.IntRange(1, 90000).Draw(rt, "ms"))
					due = min(due, now+int64(a.DeadlineMs)*1e6)
				}
				switch d := s.Arrive(now, a); d.Kind {
				case Queued:
					model[d.Req.ID] = queued{key, due}
				case Dispatch: // the class was empty and the worker free
					busy = true
					report()
				}
			},
			"advance": func(rt *rapid.T) {
				now += int64(rapid.IntRange(0, 5000).Draw(rt, "ms")) * 1e6
				for _, d := range s.Tick(now, nil) {
					if d.Kind == Reject {
						delete(model, d.Req.ID) // expired
					}
				}
			},
			"free": func(rt *rapid.T) {
				busy = false
				report()
				for d := s.Next(now); d.Kind != None; d = s.Next(now) {
					check(d)
				}
			},
		})
	})
}
