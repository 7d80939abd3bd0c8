package loadgen

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"fairdispatch/wire"
)

// TraceBlockTokens is the block size of the Mooncake trace format: each of
// a record's hash_ids stands for 512 prompt tokens.
const TraceBlockTokens = 512

// TraceRecord is one request of a trace in the Mooncake format (the
// synthetic trace of the Mooncake paper, FAST 2025, kvcache-ai/Mooncake):
// one JSON object a line.
type TraceRecord struct {
	// Timestamp is the arrival, in milliseconds from the trace's start.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are the prompt and output tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs are the prompt's blocks of 512 tokens (the last one partial),
	// remapped to small integers: two records whose first k ids are equal
	// share their first k blocks.
	HashIDs []int64 `json:"hash_ids"`
}

// ReadTrace reads a trace in the Mooncake format (JSON lines, gzipped or
// not) and checks each record: ISL and output at least 1, as many hash ids
// as 512-token blocks of the prompt, timestamps at least 0 and never going
// back. A trace with no record is an error: there is nothing to replay.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("loadgen: trace: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	var out []TraceRecord
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			var rec TraceRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				return nil, fmt.Errorf("loadgen: trace line %d: %w", line, err)
			}
			blocks := (rec.InputLength + TraceBlockTokens - 1) / TraceBlockTokens
			switch {
			case rec.InputLength < 1 || rec.OutputLength < 1:
				return nil, fmt.Errorf("loadgen: trace line %d: input %d, output %d: want >= 1", line, rec.InputLength, rec.OutputLength)
			case len(rec.HashIDs) != blocks:
				return nil, fmt.Errorf("loadgen: trace line %d: %d hash ids for %d input tokens: want %d", line, len(rec.HashIDs), rec.InputLength, blocks)
			case rec.Timestamp < 0:
				return nil, fmt.Errorf("loadgen: trace line %d: timestamp %d: want >= 0 (milliseconds from the trace's start)", line, rec.Timestamp)
			case len(out) > 0 && rec.Timestamp < out[len(out)-1].Timestamp:
				return nil, fmt.Errorf("loadgen: trace line %d: timestamp %d before the previous %d", line, rec.Timestamp, out[len(out)-1].Timestamp)
			}
			out = append(out, rec)
		}
		if errors.Is(err, io.EOF) {
			if len(out) == 0 {
				return nil, errors.New("loadgen: trace: no records")
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("loadgen: trace: %w", err)
		}
	}
}

// ReadTraceFile reads the trace at path (see ReadTrace).
func ReadTraceFile(path string) ([]TraceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	defer f.Close()
	return ReadTrace(f)
}

// TraceTokens appends the token ids of positions [0, n) of the trace block
// hashID to dst: token i is the low 32 bits of SplitMix64's finaliser of
// mix(hashID) + i. A block's tokens depend on its id and position only, so
// two prompts sharing their first k hash ids share exactly their first k ×
// 512 tokens, and (with overwhelming probability) no token of a block with
// another id.
func TraceTokens(dst []uint32, hashID int64, n int) []uint32 {
	base := mix(uint64(hashID) ^ 0x6d6f6f6e63616b65) // "mooncake"
	for i := range n {
		dst = append(dst, uint32(mix(base+uint64(i))))
	}
	return dst
}

// TraceTenant is a tenant of a trace replay and its part of the trace's
// conversations.
type TraceTenant struct {
	// Key is the tenant's fairness key.
	Key string
	// Share is its part of the conversations, > 0; the shares of a replay's
	// tenants are normalised to sum to 1.
	Share float64
}

// ReplayOptions says how a trace's records become requests.
type ReplayOptions struct {
	// BlockSize is the protocol block size (the engines' and the
	// dispatcher's --block-size), dividing 512.
	BlockSize int
	// Tenants, when not empty, assigns every conversation (the records
	// sharing their first hash id) to one tenant: the conversation's first
	// hash id, hashed to a number u in [0, 1), falls in the tenant's slice
	// of [0, 1) (slices in list order, each as wide as its share).
	Tenants []TraceTenant
	// Class is the subject token of every request (the trace has no
	// class), required.
	Class string
}

// ReplayRequest is one record of a trace made ready to publish.
type ReplayRequest struct {
	// At is the record's timestamp, in the trace's time.
	At time.Duration
	// ISL and Output are Dispatch-ISL-Tokens and Dispatch-Output-Tokens.
	ISL, Output int
	// Hashes are the chained protocol block hashes of the prompt's full
	// blocks of BlockSize tokens (docs/protocol.md, Block hashes), the
	// tokens taken from TraceTokens; at most wire.MaxHashes.
	Hashes []uint64
	// Conversation is the record's first hash id.
	Conversation int64
	// Tenant is the conversation's tenant ("" without tenants), and Class
	// the subject token.
	Tenant, Class string

	encoded string // Dispatch-Block-Hashes
}

// PrepareReplay turns records into requests (see ReplayOptions).
func PrepareReplay(recs []TraceRecord, o ReplayOptions) ([]ReplayRequest, error) {
	if o.BlockSize < 1 || TraceBlockTokens%o.BlockSize != 0 {
		return nil, fmt.Errorf("loadgen: replay block size %d: want a divisor of %d", o.BlockSize, TraceBlockTokens)
	}
	if !wire.ValidToken(o.Class) {
		return nil, fmt.Errorf("loadgen: replay class %q: want a subject token", o.Class)
	}
	for _, tn := range o.Tenants {
		if !wire.ValidKey(tn.Key) || !(tn.Share > 0) || math.IsInf(tn.Share, 0) {
			return nil, fmt.Errorf("loadgen: replay tenant %q share %v: want a fairness key and a share > 0", tn.Key, tn.Share)
		}
	}
	out := make([]ReplayRequest, 0, len(recs))
	var tokens []uint32
	for i, rec := range recs {
		tokens = tokens[:0]
		for b, id := range rec.HashIDs {
			n := min(TraceBlockTokens, rec.InputLength-b*TraceBlockTokens)
			tokens = TraceTokens(tokens, id, n)
		}
		hashes := wire.ChainHashes(nil, tokens, o.BlockSize)
		if len(hashes) > wire.MaxHashes {
			return nil, fmt.Errorf("loadgen: trace record %d: %d blocks of %d tokens, over the %d a request may carry", i, len(hashes), o.BlockSize, wire.MaxHashes)
		}
		rr := ReplayRequest{At: time.Duration(rec.Timestamp) * time.Millisecond, ISL: rec.InputLength, Output: rec.OutputLength,
			Hashes: hashes, Conversation: rec.HashIDs[0], Class: o.Class}
		if len(hashes) > 0 {
			rr.encoded = wire.EncodeHashes(hashes)
		}
		rr.Tenant = TenantOf(rr.Conversation, o.Tenants)
		out = append(out, rr)
	}
	return out, nil
}

// TenantOf returns the tenant of a conversation (its first hash id) by the
// rule of ReplayOptions.Tenants, "" without tenants.
func TenantOf(conversation int64, tenants []TraceTenant) string {
	if len(tenants) == 0 {
		return ""
	}
	total := 0.0
	for _, tn := range tenants {
		total += tn.Share
	}
	u := float64(mix(uint64(conversation)^0x74656e616e74)>>11) / (1 << 53) // "tenant"
	acc := 0.0
	for _, tn := range tenants {
		if acc += tn.Share / total; u < acc {
			return tn.Key
		}
	}
	return tenants[len(tenants)-1].Key
}

// IdealReuse returns the share of the requests' prompt tokens an unbounded
// prefix cache shared by the whole fleet would serve: for each request in
// order, its longest prefix of blocks seen in an earlier request, in tokens
// (at most ISL−1, as an engine always computes the last prompt token), over
// all prompt tokens. blockSize is the requests' protocol block size.
func IdealReuse(reqs []ReplayRequest, blockSize int) float64 {
	seen := map[uint64]struct{}{}
	var cached, prompt int
	for _, r := range reqs {
		n := 0
		for n < len(r.Hashes) {
			if _, ok := seen[r.Hashes[n]]; !ok {
				break
			}
			n++
		}
		cached += min(n*blockSize, r.ISL-1)
		prompt += r.ISL
		for _, h := range r.Hashes[n:] {
			seen[h] = struct{}{}
		}
	}
	if prompt == 0 {
		return 0
	}
	return float64(cached) / float64(prompt)
}

// Replay is a trace replay (Config.Replay): every request is published at
// its timestamp divided by Speedup after the run's start.
type Replay struct {
	// Requests in publication order (timestamps never going back).
	Requests []ReplayRequest
	// Speedup is the time compression: the trace's time over the wall's, > 0.
	Speedup float64
	// SendKeys sends each request's tenant as Dispatch-Fairness-Key; false
	// sends none (the completions still name the tenant).
	SendKeys bool
}

// TraceDirEnv names the environment variable that, when set, is the
// directory FindTrace looks in first.
const TraceDirEnv = "FAIRDISPATCH_TRACES"

// FindTrace returns the path of the trace file name: in $FAIRDISPATCH_TRACES
// when set, else in shared/traces/ of the working directory or of the
// nearest of its parents that has one (the traces live beside the
// repository, never in it: ../shared/traces/ from the main checkout).
func FindTrace(name string) (string, error) {
	if d := os.Getenv(TraceDirEnv); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("loadgen: trace %s: %w", name, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("loadgen: trace %s: %w", name, err)
	}
	for {
		p := filepath.Join(dir, "shared", "traces", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("loadgen: trace %s: not in shared/traces/ of %s or of a parent, and %s is not set", name, mustWd(), TraceDirEnv)
		}
		dir = parent
	}
}

func mustWd() string {
	d, _ := os.Getwd()
	return d
}
