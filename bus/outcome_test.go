package bus

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"fairdispatch/wire"
)

func TestOutcomeJSONMatchesSpec(t *testing.T) {
	rank, queued := 0, int64(12)
	negative := int64(-5)
	for _, c := range []struct {
		name string
		o    wire.Outcome
		want string
	}{
		{
			"dispatched",
			wire.Outcome{RequestID: "r1", Status: wire.StatusDispatched, PolicyClass: "premium", WorkerID: "w1", DPRank: &rank, QueuedMs: &queued, Attempt: 1},
			`{"request_id":"r1","status":"dispatched","policy_class":"premium","worker_id":"w1","dp_rank":0,"queued_ms":12,"attempt":1}`,
		},
		{
			"dispatched again after a redelivery",
			wire.Outcome{RequestID: "r1", Status: wire.StatusDispatched, PolicyClass: "premium", WorkerID: "w2", DPRank: &rank, QueuedMs: &queued, Attempt: 2},
			`{"request_id":"r1","status":"dispatched","policy_class":"premium","worker_id":"w2","dp_rank":0,"queued_ms":12,"attempt":2}`,
		},
		{
			"rejected after a redelivery",
			wire.Outcome{RequestID: "r5", Status: wire.StatusRejected, PolicyClass: "regular", Error: "expired", Message: "m", Attempt: 3},
			`{"request_id":"r5","status":"rejected","policy_class":"regular","attempt":3,"error":"expired","message":"m"}`,
		},
		{
			"rejected",
			wire.Outcome{
				RequestID: "r2", Status: wire.StatusRejected, PolicyClass: "regular", Error: "queue_full",
				Message: `policy class "regular" queue requests limit reached (current=2, limit=2)`,
				Details: map[string]any{"limit_kind": "requests", "current": 2, "limit": 2},
			},
			`{"request_id":"r2","status":"rejected","policy_class":"regular","error":"queue_full","message":"policy class \"regular\" queue requests limit reached (current=2, limit=2)","details":{"current":2,"limit":2,"limit_kind":"requests"}}`,
		},
		{
			"negative queued time is zero",
			wire.Outcome{RequestID: "r3", Status: wire.StatusDispatched, QueuedMs: &negative},
			`{"request_id":"r3","status":"dispatched","queued_ms":0}`,
		},
		{
			"rejected without a class",
			wire.Outcome{RequestID: "r4", Status: wire.StatusRejected, Error: "bad_request", Message: "header Dispatch-Priority: not a number"},
			`{"request_id":"r4","status":"rejected","error":"bad_request","message":"header Dispatch-Priority: not a number"}`,
		},
	} {
		got, err := wire.MarshalOutcome(c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\ngot  %s\nwant %s", c.name, got, c.want)
		}
	}
	if negative != -5 {
		t.Error("MarshalOutcome changed the caller's value")
	}
	if _, err := wire.MarshalOutcome(wire.Outcome{RequestID: "r", Status: "done"}); err == nil {
		t.Error("unknown status accepted")
	}
}

// TestPublishOutcome checks the docs/protocol.md, Outcomes example as published on the wire.
func TestPublishOutcome(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	sub, err := nc.SubscribeSync("replies.r2")
	if err != nil {
		t.Fatal(err)
	}
	o := wire.Outcome{
		RequestID: "r2", Status: wire.StatusRejected, PolicyClass: "regular", Error: "queue_full",
		Message: `policy class "regular" queue requests limit reached (current=2, limit=2)`,
		Details: map[string]any{"limit_kind": "requests", "current": 2, "limit": 2},
	}
	if err := PublishOutcome(nc, "replies.r2", o); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(testWait)
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"request_id": "r2", "status": "rejected", "policy_class": "regular",
 "error": "queue_full", "message": "policy class \"regular\" queue requests limit reached (current=2, limit=2)",
 "details": {"limit_kind": "requests", "current": 2, "limit": 2}}`
	var got, want map[string]any
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(spec), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %s, want %s", m.Data, spec)
	}
	for _, bad := range []string{"", "a.*", "a..b", "a b"} {
		if err := PublishOutcome(nc, bad, o); !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("subject %q: got %v, want ErrInvalidSubject", bad, err)
		}
	}
}

func TestSubscribeLoad(t *testing.T) {
	ts := startServer(t, nil)
	nc := connect(t, ts)
	type report struct {
		token string
		data  string
	}
	got := make(chan report, 2)
	sub, err := SubscribeLoad(nc, "", func(token string, data []byte) { got <- report{token, string(data)} })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Publish("dispatch.load.w1", []byte(`{"worker_id":"w1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("dispatch.work.w1", []byte(`x`)); err != nil { // not a load subject
		t.Fatal(err)
	}
	if err := nc.Publish("dispatch.load.w2", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []report{{"w1", `{"worker_id":"w1"}`}, {"w2", `{}`}} {
		select {
		case r := <-got:
			if r != want {
				t.Errorf("got %+v, want %+v", r, want)
			}
		case <-timeAfter():
			t.Fatal("no load report")
		}
	}
}
