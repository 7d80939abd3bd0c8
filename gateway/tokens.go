package gateway

import "fairdispatch/tokenizer"

// Tokenizer turns a request into the engine's token ids (package tokenizer:
// the model's chat template and tokenizer.json, as vLLM and SGLang apply
// them). With one, the gateway's input count is exact and it sends the
// prompt's block hashes.
type Tokenizer interface {
	// Chat returns the token ids of messages as the engine will see them.
	Chat(messages []tokenizer.Message) ([]uint32, error)
	// Encode returns the token ids of a completion prompt, special tokens
	// included.
	Encode(prompt string, addSpecial bool) []uint32
}

// Bytes per token of the estimate, and the template's overhead per chat
// message and per chat (docs/config.md, Token counts).
const (
	estBytesPerToken  = 4
	estPerMessage     = 4
	estPerChat        = 3
	estimateFormulaID = "bytes/4"
)

// count returns the request's input length in tokens and, when the tokens
// are exact, their ids (for the block hashes).
func count(tok Tokenizer, r *request) (n uint64, ids []uint32, exact bool) {
	if r.promptIDs != nil {
		return uint64(len(r.promptIDs)), r.promptIDs, true
	}
	if tok != nil && !r.multimodal {
		var err error
		if r.api == APIChat {
			ids, err = tok.Chat(r.messages)
		} else {
			ids = tok.Encode(r.prompt, true)
		}
		if err == nil {
			return uint64(len(ids)), ids, true
		}
	}
	return estimate(r), nil, false
}

// estimate is the input length without a tokenizer: a token per 4 bytes of
// text (rounded up), plus the chat template's tokens per message and chat.
func estimate(r *request) uint64 {
	per := func(s string) uint64 { return uint64((len(s) + estBytesPerToken - 1) / estBytesPerToken) }
	if r.api != APIChat {
		return per(r.prompt)
	}
	n := uint64(estPerChat)
	for _, m := range r.messages {
		n += estPerMessage + per(m.Content)
	}
	return n
}
