package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// Config is the gateway's file (docs/config.md, Gateway): the models it
// serves, each in front of one pool (a subject prefix), and the tenants that
// may call it, each with its API keys stored as SHA-256 hashes.
type Config struct {
	Models  []Model  `yaml:"models"`
	Tenants []Tenant `yaml:"tenants"`
}

// Model is one model name clients send, served by one pool.
type Model struct {
	// Name is the "model" of the OpenAI request and of GET /v1/models.
	Name string `yaml:"name"`
	// Prefix is the pool's subject prefix (docs/protocol.md, Names).
	Prefix string `yaml:"prefix"`
	// EngineModel is the model name sent to the engine; default Name.
	EngineModel string `yaml:"engine_model"`
	// MaxTokens bounds max_tokens (and max_completion_tokens), 1 to 2^31;
	// default 32768. A request over it is refused with 400.
	MaxTokens uint64 `yaml:"max_tokens"`
	// DefaultMaxTokens is sent when a request gives none (0: none is sent,
	// the engine decides).
	DefaultMaxTokens uint64 `yaml:"default_max_tokens"`
	// Tokenizer is a directory with the model's tokenizer.json and
	// tokenizer_config.json (its chat template); "" means the estimate
	// (docs/config.md, Token counts).
	Tokenizer string `yaml:"tokenizer"`
	// BlockSize is the engines' KV block size in tokens for
	// Dispatch-Block-Hashes (1 to 1024; default 16). Only with Tokenizer.
	BlockSize int `yaml:"block_size"`
}

// Tenant is one caller of the gateway: its requests carry its name as their
// fairness key (Dispatch-Fairness-Key).
type Tenant struct {
	// Name is the fairness key: 1 to 64 bytes of [A-Za-z0-9_.:@-].
	Name string `yaml:"name"`
	// APIKeySHA256 are the hex SHA-256 digests of the tenant's bearer keys
	// (`printf %s KEY | sha256sum`). The keys themselves are never stored.
	APIKeySHA256 []string `yaml:"api_key_sha256"`
	// Classes are the class tokens the tenant may use (a policy family or an
	// explicit class of the pool's policy).
	Classes []string `yaml:"classes"`
	// DefaultClass is used when the request names none; default Classes[0].
	DefaultClass string `yaml:"default_class"`
	// Priority is the default Dispatch-Priority (0 to 10^6).
	Priority float64 `yaml:"priority"`
	// MaxPriority is the highest X-Fairdispatch-Priority the tenant may ask
	// for; default Priority (it cannot raise its own).
	MaxPriority *float64 `yaml:"max_priority"`
	// DeadlineMs is the default Dispatch-Deadline-Ms (0: none; at most
	// 86,400,000). X-Fairdispatch-Deadline-Ms may ask for a shorter one.
	DeadlineMs uint64 `yaml:"deadline_ms"`
	// MaxConcurrent bounds the tenant's requests in flight at once on this
	// gateway (default 64; 0 is not allowed).
	MaxConcurrent int `yaml:"max_concurrent"`
}

// Defaults of the file.
const (
	DefaultMaxTokens     = 32768
	DefaultBlockSize     = 16
	DefaultMaxConcurrent = 64
	maxDeadlineMs        = 86_400_000
	maxPriority          = 1e6
)

// LoadConfig reads and validates the file at path.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes one YAML document strictly (unknown fields are errors,
// an empty file is an error), applies the defaults and validates it,
// reporting every problem at once, one a line, as name: path: problem.
func ParseConfig(name string, data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty document: give models and tenants", name)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document", name)
	}
	var probs []string
	add := func(path, f string, a ...any) {
		probs = append(probs, fmt.Sprintf("%s: %s: %s", name, path, fmt.Sprintf(f, a...)))
	}
	if len(c.Models) == 0 {
		add("models", "at least one model is needed")
	}
	if len(c.Tenants) == 0 {
		add("tenants", "at least one tenant is needed")
	}
	models := map[string]bool{}
	for i := range c.Models {
		m := &c.Models[i]
		p := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "" || len(m.Name) > 256:
			add(p+".name", "want 1 to 256 bytes")
		case models[m.Name]:
			add(p+".name", "%q is given twice", m.Name)
		}
		models[m.Name] = true
		if m.Prefix == "" {
			m.Prefix = naming.DefaultPrefix
		}
		if _, err := naming.New(m.Prefix); err != nil {
			add(p+".prefix", "%v", err)
		}
		if m.EngineModel == "" {
			m.EngineModel = m.Name
		}
		if m.MaxTokens == 0 {
			m.MaxTokens = DefaultMaxTokens
		}
		if m.MaxTokens > 1<<31 {
			add(p+".max_tokens", "%d: want 1 to 2^31", m.MaxTokens)
		}
		if m.DefaultMaxTokens > m.MaxTokens {
			add(p+".default_max_tokens", "%d is over max_tokens %d", m.DefaultMaxTokens, m.MaxTokens)
		}
		if m.BlockSize == 0 {
			m.BlockSize = DefaultBlockSize
		}
		if m.BlockSize < 1 || m.BlockSize > 1024 {
			add(p+".block_size", "%d: want 1 to 1024", m.BlockSize)
		}
	}
	names, hashes := map[string]bool{}, map[string]string{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if !wire.ValidKey(t.Name) {
			add(p+".name", "%q: want 1 to 64 bytes of [A-Za-z0-9_.:@-] (it is the fairness key)", t.Name)
		} else if names[t.Name] {
			add(p+".name", "%q is given twice", t.Name)
		}
		names[t.Name] = true
		if len(t.APIKeySHA256) == 0 {
			add(p+".api_key_sha256", "at least one key digest is needed")
		}
		for j, h := range t.APIKeySHA256 {
			h = strings.ToLower(strings.TrimSpace(h))
			t.APIKeySHA256[j] = h
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				add(fmt.Sprintf("%s.api_key_sha256[%d]", p, j), "want 64 hex digits (the SHA-256 of the key, not the key)")
			} else if other, dup := hashes[h]; dup {
				add(fmt.Sprintf("%s.api_key_sha256[%d]", p, j), "the same key is already tenant %q's", other)
			}
			hashes[h] = t.Name
		}
		if len(t.Classes) == 0 {
			add(p+".classes", "at least one class is needed")
		}
		for j, cl := range t.Classes {
			if !wire.ValidToken(cl) {
				add(fmt.Sprintf("%s.classes[%d]", p, j), "%q: want a class token of [A-Za-z0-9_-], at most 128 bytes", cl)
			}
		}
		if t.DefaultClass == "" && len(t.Classes) > 0 {
			t.DefaultClass = t.Classes[0]
		}
		if t.DefaultClass != "" && !t.allows(t.DefaultClass) {
			add(p+".default_class", "%q is not among classes", t.DefaultClass)
		}
		if !(t.Priority >= 0 && t.Priority <= maxPriority) {
			add(p+".priority", "%v: want 0 to 10^6", t.Priority)
		}
		if t.MaxPriority == nil {
			mp := t.Priority
			t.MaxPriority = &mp
		} else if !(*t.MaxPriority >= t.Priority && *t.MaxPriority <= maxPriority) {
			add(p+".max_priority", "%v: want priority to 10^6", *t.MaxPriority)
		}
		if t.DeadlineMs > maxDeadlineMs {
			add(p+".deadline_ms", "%d: want 0 to 86400000", t.DeadlineMs)
		}
		if t.MaxConcurrent == 0 {
			t.MaxConcurrent = DefaultMaxConcurrent
		}
		if t.MaxConcurrent < 1 || t.MaxConcurrent > 1_000_000 {
			add(p+".max_concurrent", "%d: want 1 to 1000000", t.MaxConcurrent)
		}
	}
	if len(probs) > 0 {
		return nil, errors.New(strings.Join(probs, "\n"))
	}
	return &c, nil
}

func (t *Tenant) allows(class string) bool {
	for _, c := range t.Classes {
		if c == class {
			return true
		}
	}
	return false
}

// HashKey returns the hex SHA-256 of an API key, as the file stores it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
