package wire

// LoadReport is the JSON load report a worker publishes on
// <prefix>.load.<worker_id> (docs/protocol.md, Load report). Fields a reader
// must tell absent from zero, because absence means a default, are pointers;
// a writer sets every one it knows. Unknown fields are ignored when decoding,
// so that workers may add their own.
type LoadReport struct {
	WorkerID   *string    `json:"worker_id"`
	DPStart    *uint32    `json:"data_parallel_start_rank"`
	DPSize     *uint32    `json:"data_parallel_size"`
	MaxBatched *uint64    `json:"max_num_batched_tokens,omitempty"`
	TotalKV    uint64     `json:"total_kv_blocks"`
	MaxActive  *uint64    `json:"max_active_requests,omitempty"`
	Taints     []string   `json:"taints"`
	Draining   bool       `json:"draining"`
	TTLms      *uint64    `json:"ttl_ms"`
	Instance   string     `json:"instance"`
	SeenSeq    *uint64    `json:"seen_seq"`
	Ranks      []RankLoad `json:"ranks"`
	// CompactDispatch is the highest version of the compact dispatch form
	// (CompactDispatch) the worker reads; 0: it reads the header form only.
	CompactDispatch uint64 `json:"compact_dispatch,omitempty"`
}

// RankLoad is the load of one data-parallel rank in a LoadReport.
type RankLoad struct {
	Rank                uint32 `json:"dp_rank"`
	ActivePrefillTokens uint64 `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  uint64 `json:"active_decode_blocks"`
	KVUsedBlocks        uint64 `json:"kv_used_blocks"`
	ActiveRequests      uint64 `json:"active_requests"`
}
