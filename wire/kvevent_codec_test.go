package wire_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"fairdispatch/wire"
)

func TestEventRoundTrip(t *testing.T) {
	in := wire.KVEvent{Instance: "boot-7", ID: 42, Rank: 3, Cleared: 1<<wire.Host | 1<<wire.Shared}
	in.Stored[wire.Device] = []uint64{1, 2, 3}
	in.Stored[wire.Disk] = []uint64{^uint64(0)}
	in.Removed[wire.Host] = []uint64{0}
	b, err := wire.EncodeKVEvent(&in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := wire.ParseKVEvent(b)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("got %+v, %v; want %+v (body %s)", out, err, in, b)
	}
}

// TestEventProtocolExample parses the example of docs/protocol.md, KV cache events.
func TestEventProtocolExample(t *testing.T) {
	body := `{"instance":"8f3c2a","event_id":17,"dp_rank":1,` +
		`"stored":{"device":"wT_9PiW6dX6CFylZ_27bbA"},"removed":{"host":"wT_9PiW6dX4"},"cleared":["disk"]}`
	ev, err := wire.ParseKVEvent([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := wire.KVEvent{Instance: "8f3c2a", ID: 17, Rank: 1, Cleared: 1 << wire.Disk}
	want.Stored[wire.Device] = []uint64{0x7e75ba253efd3fc1, 0x6cdb6eff59291782}
	want.Removed[wire.Host] = []uint64{0x7e75ba253efd3fc1}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("got %+v, want %+v", ev, want)
	}
}

func TestParseEventRejects(t *testing.T) {
	long := strings.Repeat("i", wire.MaxKVInstanceLen+1)
	many := wire.EncodeHashes(make([]uint64, wire.MaxHashes+1))
	for _, c := range []struct{ body, field, reason string }{
		{``, "", "is not a JSON object"},
		{`[]`, "", "is not a JSON object"},
		{`{"instance":"a","event_id":1}x`, "", "is not a JSON object"},
		{`{"event_id":1}`, "instance", "is missing"},
		{`{"instance":"","event_id":1}`, "instance", "1 to 128 bytes"},
		{`{"instance":"` + long + `","event_id":1}`, "instance", "1 to 128 bytes"},
		{`{"instance":"a"}`, "event_id", "is missing"},
		{`{"instance":"a","event_id":0}`, "event_id", "at least 1"},
		{`{"instance":"a","event_id":-1}`, "", "is not a JSON object"},
		{`{"instance":"a","event_id":1,"dp_rank":65536}`, "dp_rank", "[0, 65535]"},
		{`{"instance":"a","event_id":1,"dp_rank":-1}`, "dp_rank", "[0, 65535]"},
		{`{"instance":"a","event_id":1,"cleared":["gpu"]}`, "cleared", "unknown tier"},
		{`{"instance":"a","event_id":1,"cleared":["disk","disk"]}`, "cleared", "twice"},
		{`{"instance":"a","event_id":1,"stored":{"Device":"AAAAAAAAAAA"}}`, "stored", "unknown tier"},
		{`{"instance":"a","event_id":1,"stored":{"device":""}}`, "stored.device", "is empty"},
		{`{"instance":"a","event_id":1,"removed":{"disk":"AAAAAAAAAAA="}}`, "removed.disk", "whole number"},
		{`{"instance":"a","event_id":1,"removed":{"shared":"` + many + `"}}`, "removed.shared", "more than 8192"},
		{`{"instance":"a","event_id":1,"stored":{"device":["AAAAAAAAAAA"]}}`, "", "is not a JSON object"},
		// A tier, or the field, given twice: merged, the last winning, a
		// removal would be lost.
		{`{"instance":"a","event_id":1,"removed":{"device":"AAAAAAAAAAA","device":"AQAAAAAAAAA"}}`, "", `names tier "device" twice`},
		{`{"instance":"a","event_id":1,"removed":{"device":"AAAAAAAAAAA"},"removed":{"host":"AQAAAAAAAAA"}}`, "", "given twice"},
		{`{"instance":"a","event_id":1,"stored":{"disk":"AAAAAAAAAAA"},"Stored":{"host":"AQAAAAAAAAA"}}`, "", "given twice"},
	} {
		_, err := wire.ParseKVEvent([]byte(c.body))
		var ee *wire.KVEventError
		if !errors.As(err, &ee) || ee.Field != c.field || !strings.Contains(ee.Reason, c.reason) {
			t.Errorf("%.80s: got %v, want field %q reason containing %q", c.body, err, c.field, c.reason)
		}
	}
}
