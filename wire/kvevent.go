package wire

// kvEventJSON is the JSON record of one KV cache event, which a worker
// publishes to <prefix>.kv.<worker_id> (docs/protocol.md, KV cache events).
// Fields a reader must tell absent from zero are pointers. Stored and Removed
// map a tier name (device, host, disk, shared) to a list of block hashes, each
// list base64url without padding of little-endian uint64s. ParseKVEvent
// validates a decoded record into a KVEvent; EncodeKVEvent fills one.
type kvEventJSON struct {
	Instance *string           `json:"instance"`
	EventID  *uint64           `json:"event_id"`
	DPRank   *int64            `json:"dp_rank,omitempty"`
	Stored   map[string]string `json:"stored,omitempty"`
	Removed  map[string]string `json:"removed,omitempty"`
	Cleared  []string          `json:"cleared,omitempty"`
}

// KVResync is the JSON body of a resynchronisation request, which the
// dispatcher publishes to <prefix>.kvsync.<worker_id> when one of the
// worker's ranks is stale (docs/protocol.md, Resynchronisation).
type KVResync struct {
	Rank int32 `json:"dp_rank"`
}
