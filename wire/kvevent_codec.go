package wire

import (
	"encoding/json"
	"strconv"
)

// MaxKVInstanceLen bounds the bytes of a KV cache event's instance (at least
// 1): the bound of a load report's instance, so that a worker sends one
// instance in both (docs/protocol.md, KV cache events).
const MaxKVInstanceLen = 128

// KVEvent is one decoded cache event of a worker rank (docs/protocol.md, KV cache
// events). It is applied in this order: Cleared, then Removed, then Stored.
type KVEvent struct {
	Instance string             // the worker process; 1 to MaxKVInstanceLen bytes
	ID       uint64             // event_id: 1, 2, 3... per rank within an instance
	Rank     int32              // dp_rank, in [0, MaxRank]
	Cleared  Tiers              // tiers whose blocks the rank dropped
	Removed  [NumTiers][]uint64 // blocks the rank dropped, per tier
	Stored   [NumTiers][]uint64 // blocks the rank now holds, per tier
}

// KVEventError says why an event body was rejected.
type KVEventError struct {
	Field  string // the JSON field at fault, e.g. "stored.device"; "" for the body
	Reason string
}

// Error returns e.g. `kv event: stored.device: is not base64url without padding`.
func (e *KVEventError) Error() string {
	if e.Field == "" {
		return "kv event: " + e.Reason
	}
	return "kv event: " + e.Field + ": " + e.Reason
}

// ParseKVEvent decodes and validates the JSON body of one KV cache event
// (docs/protocol.md, KV cache events). instance (1 to MaxKVInstanceLen bytes)
// and event_id (>= 1) are required; dp_rank is in [0, MaxRank] and 0 when
// absent; stored and removed map known tier names to non-empty hash lists
// of at most MaxHashes hashes, decoded strictly (DecodeHashes); cleared lists
// known tier names, each at most once. Unknown fields are ignored and field
// names match as encoding/json matches them, as for load reports. A rejected
// body yields an *KVEventError.
func ParseKVEvent(data []byte) (KVEvent, error) {
	var ev KVEvent
	var r kvEventJSON
	if err := json.Unmarshal(data, &r); err != nil {
		return ev, &KVEventError{Reason: "is not a JSON object of the KV event fields: " + err.Error()}
	}
	switch {
	case r.Instance == nil:
		return ev, &KVEventError{Field: "instance", Reason: "is missing"}
	case *r.Instance == "" || len(*r.Instance) > MaxKVInstanceLen:
		return ev, &KVEventError{Field: "instance", Reason: "must be 1 to " + strconv.Itoa(MaxKVInstanceLen) + " bytes"}
	case r.EventID == nil:
		return ev, &KVEventError{Field: "event_id", Reason: "is missing"}
	case *r.EventID == 0:
		return ev, &KVEventError{Field: "event_id", Reason: "must be at least 1"}
	case r.DPRank != nil && (*r.DPRank < 0 || *r.DPRank > MaxRank):
		return ev, &KVEventError{Field: "dp_rank", Reason: "must be in [0, " + strconv.Itoa(MaxRank) + "]"}
	}
	ev.Instance, ev.ID = *r.Instance, *r.EventID
	if r.DPRank != nil {
		ev.Rank = int32(*r.DPRank)
	}
	for _, name := range r.Cleared {
		t, ok := ParseTier(name)
		if !ok {
			return ev, &KVEventError{Field: "cleared", Reason: "names an unknown tier " + strconv.Quote(cutName(name))}
		}
		if ev.Cleared.Has(t) {
			return ev, &KVEventError{Field: "cleared", Reason: "names " + name + " twice"}
		}
		ev.Cleared |= 1 << t
	}
	if err := decodeTiers("removed", r.Removed, &ev.Removed); err != nil {
		return ev, err
	}
	if err := decodeTiers("stored", r.Stored, &ev.Stored); err != nil {
		return ev, err
	}
	return ev, nil
}

func decodeTiers(field string, m map[string]string, dst *[NumTiers][]uint64) error {
	// Walk the tiers in order, so that the error reported is deterministic.
	for t := range NumTiers {
		v, ok := m[t.String()]
		if !ok {
			continue
		}
		hs, err := DecodeHashes(nil, v)
		if err != nil {
			return &KVEventError{Field: field + "." + t.String(), Reason: err.Error()}
		}
		dst[t] = hs
	}
	for name := range m {
		if _, ok := ParseTier(name); !ok {
			return &KVEventError{Field: field, Reason: "names an unknown tier " + strconv.Quote(cutName(name))}
		}
	}
	return nil
}

func cutName(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// EncodeKVEvent returns the JSON body of an event, as ParseKVEvent reads it:
// empty hash lists are left out.
func EncodeKVEvent(ev *KVEvent) ([]byte, error) {
	inst, id, rank := ev.Instance, ev.ID, int64(ev.Rank)
	r := kvEventJSON{Instance: &inst, EventID: &id, DPRank: &rank}
	for t := range NumTiers {
		if ev.Cleared.Has(t) {
			r.Cleared = append(r.Cleared, t.String())
		}
		if len(ev.Stored[t]) > 0 {
			if r.Stored == nil {
				r.Stored = tierMap{}
			}
			r.Stored[t.String()] = EncodeHashes(ev.Stored[t])
		}
		if len(ev.Removed[t]) > 0 {
			if r.Removed == nil {
				r.Removed = tierMap{}
			}
			r.Removed[t.String()] = EncodeHashes(ev.Removed[t])
		}
	}
	return json.Marshal(r)
}
