package mockworker_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/natstest"
	"fairdispatch/mockworker"
)

// TestKeyCostFactors: a per-key factor overrides CostFactor for that key's
// requests only; NoCompletions publishes no record at all.
func TestKeyCostFactors(t *testing.T) {
	for _, none := range []bool{false, true} {
		_, nc := natstest.StartServer(t)
		var mu sync.Mutex
		got := map[string][]uint64{} // key -> prefill_tokens reported
		sub, err := nc.Subscribe("dispatch.done.*", func(m *nats.Msg) {
			var c mockworker.Completion
			if err := json.Unmarshal(m.Data, &c); err != nil {
				t.Errorf("completion %s: %v", m.Data, err)
			}
			mu.Lock()
			got[c.FairnessKey] = append(got[c.FairnessKey], c.PrefillTokens)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		m := startMock(t, nc, mockworker.Config{ID: "w1", CostFactor: 2, NoCompletions: none,
			KeyCostFactors: map[string]float64{"tenant-0": 10}})
		natstest.StartFakeDispatcher(t, nc, "dispatch", 30*time.Second, toW1)
		const n = 9
		publish(t, nc, n, 100) // keys tenant-0, tenant-1, tenant-2 in turn
		natstest.Eventually(t, wait, func() bool { return m.Stats().Completed == n }, "%d completed", n)
		if !none {
			natstest.Eventually(t, wait, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got["tenant-0"])+len(got["tenant-1"])+len(got["tenant-2"]) == n
			}, "%d records", n)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = sub.Unsubscribe()
		mu.Lock()
		if none {
			if len(got) != 0 {
				t.Errorf("NoCompletions: got records %v, want none", got)
			}
		} else {
			for k, want := range map[string]uint64{"tenant-0": 1000, "tenant-1": 200, "tenant-2": 200} {
				if len(got[k]) != 3 || got[k][0] != want || got[k][1] != want || got[k][2] != want {
					t.Errorf("key %s: got prefill_tokens %v, want three of %d", k, got[k], want)
				}
			}
		}
		mu.Unlock()
	}
	if _, err := mockworker.New(nil, mockworker.Config{ID: "w1", KeyCostFactors: map[string]float64{"a": 0}}, zerolog.Nop()); err == nil {
		t.Error("a key cost factor of 0 was accepted")
	}
}
