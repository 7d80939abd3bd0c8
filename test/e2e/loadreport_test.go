package e2e

import (
	"slices"
	"testing"
	"time"
)

// docs/protocol.md, Load report: a load report whose subject and worker_id disagree, that does not
// parse, or that names a rank outside [start, start + size) is dropped whole
// and counted by reason; it never creates a worker nor changes one.

const frlDropped = "fairdispatch_load_reports_dropped_total"

func TestLoadReportBadReportsDroppedAndCounted(t *testing.T) {
	f := startFixture(t)
	p, nc := f.p, f.nc

	reasons := []string{"mismatch", "parse", "rank", "invalid"}
	before := map[string]float64{}
	for _, r := range reasons {
		before[r] = p.metric(frlDropped, `reason="`+r+`"`)
	}

	publish := func(token, body string) {
		t.Helper()
		if err := nc.Publish("dispatch.load."+token, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// A live worker the bad reports try to change; a long TTL and no other
	// reports, so that only a wrongly applied report could change it.
	publish("steady", `{"worker_id":"steady","ttl_ms":60000,"instance":"s1","ranks":[{"dp_rank":0,"active_prefill_tokens":100}]}`)
	waitLive(t, p, "steady")

	bad := []struct{ reason, token, body string }{
		// subject and worker_id disagree
		{"mismatch", "steady", `{"worker_id":"impostor","ttl_ms":60000,"draining":true,"ranks":[{"dp_rank":0,"active_prefill_tokens":99999}]}`},
		{"mismatch", "phantom", `{"worker_id":"steady","ttl_ms":60000,"draining":true,"ranks":[{"dp_rank":0,"active_prefill_tokens":99999}]}`},
		// does not parse
		{"parse", "garbled", `not json`},
		{"parse", "garbled", `{"worker_id":"garbled","ttl_ms":60000`},
		{"parse", "steady", `{"worker_id":"steady","ttl_ms":60000,"draining":"yes"}`},
		{"parse", "anonymous", `{"ttl_ms":60000}`},
		// a rank outside [start, start + size)
		{"rank", "steady", `{"worker_id":"steady","ttl_ms":60000,"draining":true,"ranks":[{"dp_rank":1,"active_prefill_tokens":99999}]}`},
		{"rank", "ranky", `{"worker_id":"ranky","data_parallel_start_rank":4,"data_parallel_size":2,"ttl_ms":60000,"ranks":[{"dp_rank":3}]}`},
		{"rank", "ranky", `{"worker_id":"ranky","data_parallel_start_rank":4,"data_parallel_size":2,"ttl_ms":60000,"ranks":[{"dp_rank":6}]}`},
	}
	want := map[string]float64{}
	for _, r := range reasons {
		want[r] = before[r]
	}
	for _, b := range bad {
		publish(b.token, b.body)
		want[b.reason]++
	}
	// Reports are handled in arrival order: once this one shows, every bad
	// report before it has been handled too.
	publish("sentinel", `{"worker_id":"sentinel","ttl_ms":60000}`)

	var v queueView
	waitFor(t, 10*time.Second, "the sentinel worker live and every bad report counted", func() bool {
		var ok bool
		v, ok = p.queues()
		if !ok || !v.hasWorker("sentinel") {
			return false
		}
		for _, r := range reasons {
			if p.metric(frlDropped, `reason="`+r+`"`) != want[r] {
				return false
			}
		}
		return true
	})
	for _, r := range reasons {
		got := p.metric(frlDropped, `reason="`+r+`"`)
		t.Logf("%s{reason=%q}: %v -> %v", frlDropped, r, before[r], got)
	}

	var ids []string
	for _, w := range v.Workers {
		ids = append(ids, w.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"sentinel", "steady"}) {
		t.Errorf("/debug/queues workers = %v, want [sentinel steady]", ids)
	}
	if w := v.worker("steady"); w != nil {
		if w.Draining || len(w.Ranks) != 1 || w.Ranks[0].Rank != 0 || w.Ranks[0].ReportedPrefill != 100 {
			t.Errorf("worker steady = %+v, want its one valid report (not draining, rank 0 with 100 prefill tokens)", w)
		}
	}
	// The gauge is set just after the snapshot is published.
	waitFor(t, 20*time.Second, "fairdispatch_live_workers to count the sentinel", func() bool {
		return p.metric("fairdispatch_live_workers") >= 2
	})
	if got := p.metric("fairdispatch_live_workers"); got != 2 {
		t.Errorf("fairdispatch_live_workers = %v, want 2", got)
	}
}
