package wire

import (
	"encoding/json"
	"strconv"
)

// MaxTaints bounds a load report's taints: a report with more is dropped.
const MaxTaints = 64

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
	// Preempt declares that the worker acts on cancellations with reason
	// preempt (docs/protocol.md, Preemption): false or absent, the
	// dispatcher never asks it to preempt.
	Preempt bool `json:"preempt,omitempty"`
}

// RankLoad is the load of one data-parallel rank in a LoadReport.
type RankLoad struct {
	Rank                uint32 `json:"dp_rank"`
	ActivePrefillTokens uint64 `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  uint64 `json:"active_decode_blocks"`
	KVUsedBlocks        uint64 `json:"kv_used_blocks"`
	ActiveRequests      uint64 `json:"active_requests"`
}

// AppendLoadReport appends r as JSON to dst: the bytes json.Marshal(r) gives,
// without its reflection, for a worker that reports at every change of load.
func AppendLoadReport(dst []byte, r *LoadReport) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = appendStringPtr(dst, r.WorkerID)
	dst = append(dst, `,"data_parallel_start_rank":`...)
	dst = appendUintPtr(dst, r.DPStart)
	dst = append(dst, `,"data_parallel_size":`...)
	dst = appendUintPtr(dst, r.DPSize)
	if r.MaxBatched != nil {
		dst = strconv.AppendUint(append(dst, `,"max_num_batched_tokens":`...), *r.MaxBatched, 10)
	}
	dst = strconv.AppendUint(append(dst, `,"total_kv_blocks":`...), r.TotalKV, 10)
	if r.MaxActive != nil {
		dst = strconv.AppendUint(append(dst, `,"max_active_requests":`...), *r.MaxActive, 10)
	}
	dst = appendList(append(dst, `,"taints":`...), r.Taints, appendJSONString)
	dst = strconv.AppendBool(append(dst, `,"draining":`...), r.Draining)
	dst = append(dst, `,"ttl_ms":`...)
	dst = appendUintPtr(dst, r.TTLms)
	dst = appendJSONString(append(dst, `,"instance":`...), r.Instance)
	dst = append(dst, `,"seen_seq":`...)
	dst = appendUintPtr(dst, r.SeenSeq)
	dst = appendList(append(dst, `,"ranks":`...), r.Ranks, appendRankLoad)
	if r.CompactDispatch != 0 {
		dst = strconv.AppendUint(append(dst, `,"compact_dispatch":`...), r.CompactDispatch, 10)
	}
	if r.Preempt {
		dst = append(dst, `,"preempt":true`...)
	}
	return append(dst, '}')
}

// appendList appends xs as a JSON array, each element by f; nil as null.
func appendList[T any](dst []byte, xs []T, f func([]byte, T) []byte) []byte {
	if xs == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = f(dst, x)
	}
	return append(dst, ']')
}

func appendRankLoad(dst []byte, rk RankLoad) []byte {
	dst = strconv.AppendUint(append(dst, `{"dp_rank":`...), uint64(rk.Rank), 10)
	dst = strconv.AppendUint(append(dst, `,"active_prefill_tokens":`...), rk.ActivePrefillTokens, 10)
	dst = strconv.AppendUint(append(dst, `,"active_decode_blocks":`...), rk.ActiveDecodeBlocks, 10)
	dst = strconv.AppendUint(append(dst, `,"kv_used_blocks":`...), rk.KVUsedBlocks, 10)
	dst = strconv.AppendUint(append(dst, `,"active_requests":`...), rk.ActiveRequests, 10)
	return append(dst, '}')
}

func appendStringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, *s)
}

func appendUintPtr[T uint32 | uint64](dst []byte, v *T) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendUint(dst, uint64(*v), 10)
}

// appendJSONString appends s quoted as encoding/json quotes it: as is when
// it is printable ASCII that needs no escape (ids, taints and instances as
// workers send them), else through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
