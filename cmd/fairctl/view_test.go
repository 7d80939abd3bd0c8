package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const sampleQueues = `{"at":"2026-01-02T15:04:05Z","connected":true,"startup_grace":false,"held":9,"in_flight":2,
"classes":[{"name":"premium","pending_requests":7,"pending_isl_tokens":700,"deficit":-12,"oldest_wait_ms":2500,"dispatched":40,"dispatch_rate":3.5,"fairness_keys":2},
{"name":"regular","pending_requests":0,"pending_isl_tokens":0,"deficit":0,"oldest_wait_ms":0,"dispatched":1,"dispatch_rate":0,"fairness_keys":0}],
"workers":[{"worker_id":"w1","overloaded":true,"ranks":[{"dp_rank":0,"reported_prefill_tokens":5000,"booked_prefill_tokens":100,"active_prefill_tokens":5100,"active_decode_blocks":4,"kv_used_blocks":8,"active_requests":2}]}]}`

func TestQueuesAndWorkersTables(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/queues" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		w.Write([]byte(sampleQueues))
	}))
	defer srv.Close()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"queues"}, []string{
			"CLASS  BACKLOG  ISL TOKENS  OLDEST WAIT  DEFICIT  DISPATCH/S  DISPATCHED  KEYS",
			"premium        7         700         2.5s      -12         3.5          40     2",
			"regular        0           0            -        0         0.0           1     0",
		}},
		{[]string{"workers"}, []string{
			"w1     0     5100      5000     100              4        8       2  overloaded",
		}},
		{[]string{"--json", "queues"}, []string{`"name": "premium"`, `"dispatch_rate": 3.5`}},
		{[]string{"--json", "workers"}, []string{`"worker_id": "w1"`}},
		// Global flags after the command, as operations.md writes them.
		{[]string{"queues", "--json"}, []string{`"name": "premium"`}},
		{[]string{"workers", "--json", "--timeout", "3s"}, []string{`"worker_id": "w1"`}},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		args := append([]string{"--admin", srv.URL, "--admin-token", "tok"}, tt.args...)
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("fairctl %v: exit %d: %s", tt.args, code, errb.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("fairctl %v:\n%s\nwant a line with %q", tt.args, out.String(), w)
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--admin", srv.URL, "queues"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "404") {
		t.Errorf("without the token: exit %d, stderr %q; want 1 and the 404", code, errb.String())
	}
}

// TestExtensionsTable: a class with budgets, a drain rate or preemptions gets
// a row of them, and each top key with a budget a row; none without.
func TestExtensionsTable(t *testing.T) {
	const withBudgets = `{"classes":[{"name":"interactive","pending_requests":3,"throttled_keys":1,"budget_charged":4096,"drain_rate":2500.4,
"top_keys":[{"key":"acme","queued_requests":3,"weight":1,"lead":0,"budget":{"tokens_per_second":2000,"burst":4000,"level":-12.5,"throttled":true}}]},
{"name":"batch","pending_requests":0,"preempted":7},{"name":"plain"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(withBudgets)) }))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--admin", srv.URL, "queues"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, w := range []string{
		"CLASS  THROTTLED KEYS  BUDGET CHARGED  DRAIN TOKENS/S  PREEMPTED",
		"interactive               1            4096            2500          -",
		"batch               -               -               -          7",
		"CLASS   KEY  QUEUED  TOKENS/S  BURST  LEVEL      STATE",
		"interactive  acme       3      2000   4000    -12  throttled",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("queues:\n%s\nwant a line with %q", out.String(), w)
		}
	}
	if strings.Count(out.String(), "plain") != 1 {
		t.Errorf("queues:\n%s\nthe class without extensions has a row", out.String())
	}
	out.Reset()
	var v queuesView
	v.Classes = nil
	if err := renderExtensions(&out, &v); err != nil || out.Len() != 0 {
		t.Errorf("no class with extensions: wrote %q, %v; want nothing", out.String(), err)
	}
}

func TestWaitString(t *testing.T) {
	for ms, want := range map[int64]string{0: "-", 999: "999ms", 1500: "1.5s", 90_000: "1.5m", 5_400_000: "1.5h"} {
		if got := waitString(ms); got != want {
			t.Errorf("waitString(%d) = %q, want %q", ms, got, want)
		}
	}
}
