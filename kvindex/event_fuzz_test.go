package kvindex_test

import (
	"errors"
	"reflect"
	"testing"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
)

// FuzzParseEvent feeds wire.ParseKVEvent arbitrary bodies. It must not panic; an
// error must be an *EventError; a nil error implies the bounds of
// docs/protocol.md, KV cache events, that the index accepts the event, and
// that encoding it and parsing it back gives the same event. More seeds are in
// testdata/fuzz/FuzzParseEvent.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"instance":"8f3c2a","event_id":17,"dp_rank":1,"stored":{"device":"wT_9PiW6dX6CFylZ_27bbA"},"removed":{"host":"wT_9PiW6dX4"},"cleared":["disk"]}`,
		`{"instance":"a","event_id":1}`,
		`{"instance":"a","event_id":1,"cleared":["device","host","disk","shared"]}`,
		`{"instance":"a","event_id":18446744073709551615,"dp_rank":65535}`,
		`{"instance":"a","event_id":1,"stored":{"gpu":"AAAAAAAAAAA"}}`,
		`{"instance":"a","event_id":1,"stored":{"device":"AAAAAAAAAAB"}}`,
		`{"INSTANCE":"a","Event_Id":2,"instance":"b"}`,
		`{"instance":null,"event_id":1}`,
		`null`, `{`, "\xff", ``,
	} {
		f.Add([]byte(s))
	}
	x, err := kvindex.New(kvindex.Config{Weights: kvindex.DefaultWeights, MaxBlocks: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := wire.ParseKVEvent(body)
		if err != nil {
			var ee *wire.KVEventError
			if !errors.As(err, &ee) {
				t.Fatalf("got %T %v, want *wire.KVEventError", err, err)
			}
			return
		}
		if ev.Instance == "" || len(ev.Instance) > wire.MaxKVInstanceLen || ev.ID == 0 ||
			ev.Rank < 0 || ev.Rank > wire.MaxRank || ev.Cleared&^wire.AllTiers != 0 {
			t.Fatalf("accepted out of bounds: %+v", ev)
		}
		for tier := range wire.NumTiers {
			if len(ev.Stored[tier]) > wire.MaxHashes || len(ev.Removed[tier]) > wire.MaxHashes {
				t.Fatalf("accepted a list of more than %d hashes", wire.MaxHashes)
			}
		}
		if _, err := x.Apply("w", &ev); err != nil {
			t.Fatalf("the index refused a parsed event: %v", err)
		}
		b, err := wire.EncodeKVEvent(&ev)
		if err != nil {
			t.Fatal(err)
		}
		again, err := wire.ParseKVEvent(b)
		if err != nil || !reflect.DeepEqual(again, ev) {
			t.Fatalf("round trip: got %+v, %v; want %+v", again, err, ev)
		}
	})
}
