package engineworker

// The engine's Prometheus text to the fields of a load report. The series
// are those of vllm/v1/metrics/loggers.py (labels model_name and engine, the
// engine index being the data-parallel rank) and of
// python/sglang/srt/metrics/collector.py (labels model_name and, with DP
// attention, dp_rank); docs/deployment.md lists them with their meaning.

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Sample is one line of Prometheus text: a series and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics parses the Prometheus text exposition format, keeping the
// samples of the series whose name starts with prefix ("vllm:", "sglang:").
// Comments, timestamps and other series are skipped; a malformed line of a
// kept series is an error.
func ParseMetrics(text []byte, prefix string) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq < 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return s, fmt.Errorf("bad labels in %q", line)
			}
			name := strings.TrimSpace(line[:eq])
			line = line[eq+2:]
			var v strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(line[j])
					}
					continue
				}
				v.WriteByte(line[j])
			}
			if j == len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.Labels[name] = v.String()
			line = line[j+1:]
		}
	}
	f := strings.Fields(line)
	if len(f) < 1 {
		return s, fmt.Errorf("no value for %s", s.Name)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %s: %w", s.Name, err)
	}
	s.Value = v
	return s, nil
}

// EngineLoad is what the metrics say about one rank.
type EngineLoad struct {
	Running, Waiting float64
	// KVUsage is the fraction of the KV cache in use, 0 to 1.
	KVUsage float64
	// TotalKVBlocks is vllm:cache_config_info's num_gpu_blocks; 0 unknown.
	TotalKVBlocks uint64
	// BlockSize is the engine's block size (cache_config_info); 0 unknown.
	BlockSize int
	// PrefixQueries and PrefixHits are the prefix cache counters, in tokens.
	PrefixQueries, PrefixHits float64
}

// LoadsFromMetrics reads the load of each rank from the samples of engine
// ("vllm" or "sglang"). A series without a rank label counts for rank
// defaultRank (a single-rank engine).
func LoadsFromMetrics(engine string, samples []Sample, defaultRank int) map[int]EngineLoad {
	out := map[int]EngineLoad{}
	rankLabel := "engine"
	if engine == "sglang" {
		rankLabel = "dp_rank"
	}
	sawKV := map[int]bool{}
	for _, s := range samples {
		r := defaultRank
		if v, ok := s.Labels[rankLabel]; ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				continue
			}
			r = n
		}
		l := out[r]
		switch s.Name {
		case "vllm:num_requests_running", "sglang:num_running_reqs":
			l.Running = s.Value
		case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
			l.Waiting = s.Value
		case "vllm:kv_cache_usage_perc", "sglang:token_usage":
			l.KVUsage, sawKV[r] = s.Value, true
		case "vllm:gpu_cache_usage_perc": // deprecated in vLLM 0.9, the same value
			if !sawKV[r] {
				l.KVUsage = s.Value
			}
		case "vllm:prefix_cache_queries_total", "sglang:prompt_tokens_total":
			l.PrefixQueries = s.Value
		case "vllm:prefix_cache_hits_total", "sglang:cached_tokens_total":
			l.PrefixHits = s.Value
		case "vllm:cache_config_info":
			if n, err := strconv.ParseUint(s.Labels["num_gpu_blocks"], 10, 64); err == nil {
				l.TotalKVBlocks = n
			}
			if n, err := strconv.Atoi(s.Labels["block_size"]); err == nil {
				l.BlockSize = n
			}
		default:
			continue
		}
		out[r] = l
	}
	return out
}
