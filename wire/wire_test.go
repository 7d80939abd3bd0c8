package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"fairdispatch/wire"
)

func ptr[T any](v T) *T { return &v }

// roundTrip encodes v with marshal and fails the test unless json.Unmarshal
// reads the same value back; it returns the encoding.
func roundTrip[T any](t *testing.T, v T, marshal func(T) ([]byte, error)) []byte {
	t.Helper()
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got T
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Errorf("round trip of %s:\ngot  %+v\nwant %+v", b, got, v)
	}
	return b
}

// TestOutcomeRoundTrip: what the dispatcher marshals, a reader decodes to the
// same record, with the field names of docs/protocol.md, Outcomes.
func TestOutcomeRoundTrip(t *testing.T) {
	for _, o := range []wire.Outcome{
		{RequestID: "r1", Status: wire.StatusDispatched, PolicyClass: "premium", WorkerID: "w1", DPRank: ptr(0), QueuedMs: ptr(int64(12)), Attempt: 2},
		{RequestID: "r2", Status: wire.StatusRejected, PolicyClass: "regular", Attempt: 1, Error: "queue_full", Message: "m",
			Details: map[string]any{"limit_kind": "requests", "current": float64(2), "limit": float64(2)}},
	} {
		b := roundTrip(t, o, wire.MarshalOutcome)
		var fields map[string]any
		_ = json.Unmarshal(b, &fields)
		for _, k := range []string{"request_id", "status", "policy_class", "attempt"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s: field %q missing", b, k)
			}
		}
	}
	if _, err := wire.MarshalOutcome(wire.Outcome{RequestID: "r", Status: "done"}); err == nil {
		t.Error("unknown status accepted")
	}
}

// TestCompletionRoundTrip: a completion record survives encoding, times to the
// nanosecond.
func TestCompletionRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	c := wire.Completion{RequestID: "r1", Class: "premium", WorkerID: "w1", DPRank: 1, Seq: 9, QueuedMs: 12,
		ReceivedAt: at, StartedAt: at.Add(time.Millisecond), FinishedAt: at.Add(time.Second)}
	roundTrip(t, c, func(c wire.Completion) ([]byte, error) { return json.Marshal(c) })
}

// TestKVEventFieldNames: a KV event EncodeKVEvent writes carries the field
// names of docs/protocol.md, KV cache events, and ParseKVEvent reads it back;
// the resync request body is {"dp_rank": r}.
func TestKVEventFieldNames(t *testing.T) {
	ev := wire.KVEvent{Instance: "i1", ID: 3, Rank: 2, Cleared: 1 << wire.Disk}
	ev.Stored[wire.Device] = []uint64{1}
	ev.Removed[wire.Host] = []uint64{2}
	b, err := wire.EncodeKVEvent(&ev)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"instance", "event_id", "dp_rank", "stored", "removed", "cleared"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("%s: field %q missing", b, k)
		}
	}
	if fields["instance"] != "i1" || fields["event_id"] != 3.0 || fields["dp_rank"] != 2.0 ||
		!reflect.DeepEqual(fields["cleared"], []any{"disk"}) {
		t.Errorf("fields %v", fields)
	}
	if got, err := wire.ParseKVEvent(b); err != nil || !reflect.DeepEqual(got, ev) {
		t.Fatalf("decoded %+v, %v from %s, want %+v", got, err, b, ev)
	}
	if b, _ := json.Marshal(wire.KVResync{Rank: 5}); string(b) != `{"dp_rank":5}` {
		t.Fatalf("resync body %s", b)
	}
}
