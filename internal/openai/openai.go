// Package openai holds the one object of the OpenAI API that several programs
// here read or write: the usage object. The gateway reads it from the engine
// worker's responses, the engine worker from vLLM's and SGLang's answers, and
// the mock worker and the fake engine write it. Each keeps its own request
// and answer shapes; only this one is theirs in common.
package openai

// Usage is the usage object of a completion or chat completion (OpenAI's API
// reference; vLLM's protocol.py UsageInfo, whose field order it keeps).
// PromptTokensDetails is present where the engine reports what its prefix
// cache served (vLLM with --enable-prompt-tokens-details, SGLang with
// --enable-cache-report).
type Usage struct {
	PromptTokens        uint64               `json:"prompt_tokens"`
	TotalTokens         uint64               `json:"total_tokens"`
	CompletionTokens    uint64               `json:"completion_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails is the usage object's prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens uint64 `json:"cached_tokens"` // prompt tokens served from the prefix cache
}

// NewUsage returns the usage of a prompt of prompt tokens, completion output
// tokens and, with details, cached tokens of the prompt served from the cache.
func NewUsage(prompt, completion, cached uint64, details bool) *Usage {
	u := &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	if details {
		u.PromptTokensDetails = &PromptTokensDetails{CachedTokens: cached}
	}
	return u
}

// Cached returns the prompt's tokens served from the cache: 0 when the
// engine did not report them.
func (u *Usage) Cached() uint64 {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}
