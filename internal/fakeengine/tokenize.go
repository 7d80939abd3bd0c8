package fakeengine

import (
	"hash/fnv"
	"strings"
)

// Token ids of the toy chat template (a stand-in for a model's template as
// vLLM applies it in vllm/entrypoints/chat_utils.py: the ids include the
// BOS and the role markers).
const (
	TokenBOS       = 1
	TokenSystem    = 2
	TokenUser      = 3
	TokenAssistant = 4
	TokenEnd       = 5
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// WordToken is the id of one word: FNV-1a 32 of the word, mod 50000, plus 100.
func WordToken(w string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(w))
	return h.Sum32()%50000 + 100
}

// TokenizeText returns the ids of a completion prompt: BOS, then one id per word.
func TokenizeText(s string) []uint32 {
	out := []uint32{TokenBOS}
	for _, w := range strings.Fields(s) {
		out = append(out, WordToken(w))
	}
	return out
}

// TokenizeChat returns the ids of a chat prompt: BOS; per message its role
// marker, its words and TokenEnd; then TokenAssistant when a generation
// prompt is added (the default of a chat completion).
func TokenizeChat(msgs []Message, addGenerationPrompt bool) []uint32 {
	out := []uint32{TokenBOS}
	for _, m := range msgs {
		switch m.Role {
		case "system", "developer":
			out = append(out, TokenSystem)
		case "assistant":
			out = append(out, TokenAssistant)
		default:
			out = append(out, TokenUser)
		}
		for _, w := range strings.Fields(m.Content) {
			out = append(out, WordToken(w))
		}
		out = append(out, TokenEnd)
	}
	if addGenerationPrompt {
		out = append(out, TokenAssistant)
	}
	return out
}
