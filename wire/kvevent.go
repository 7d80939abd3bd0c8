package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// kvEventJSON is the JSON record of one KV cache event, which a worker
// publishes to <prefix>.kv.<worker_id> (docs/protocol.md, KV cache events).
// Fields a reader must tell absent from zero are pointers. Stored and Removed
// map a tier name (device, host, disk, shared) to a list of block hashes, each
// list base64url without padding of little-endian uint64s. ParseKVEvent
// validates a decoded record into a KVEvent; EncodeKVEvent fills one.
type kvEventJSON struct {
	Instance *string  `json:"instance"`
	EventID  *uint64  `json:"event_id"`
	DPRank   *int64   `json:"dp_rank,omitempty"`
	Stored   tierMap  `json:"stored,omitempty"`
	Removed  tierMap  `json:"removed,omitempty"`
	Cleared  []string `json:"cleared,omitempty"`
}

// KVResync is the JSON body of a resynchronisation request, which the
// dispatcher publishes to <prefix>.kvsync.<worker_id> when one of the
// worker's ranks is stale (docs/protocol.md, Resynchronisation).
type KVResync struct {
	Rank int32 `json:"dp_rank"`
}

// tierMap is stored's or removed's object, tier name to hashes. A tier named
// twice (or the field given twice) is refused, not merged with the last one
// winning, which would lose a removal and leave the index claiming blocks
// the engine evicted.
type tierMap map[string]string

func (m *tierMap) UnmarshalJSON(b []byte) error {
	if *m != nil {
		return errors.New("the field is given twice")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		if string(bytes.TrimSpace(b)) == "null" {
			return nil
		}
		return errors.New("want an object of tier names to hashes")
	}
	out := tierMap{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		var v string
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("names tier %q twice", cutName(name))
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	*m = out
	return nil
}
