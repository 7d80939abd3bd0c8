// Package tokenizer turns chat and completion prompts into the token ids an
// engine will see, from the model's own files: tokenizer.json (the Hugging
// Face tokenizers layout) and the chat template (chat_template.jinja, else
// tokenizer_config.json's, as transformers loads it). The
// gateway uses the ids for an exact input length (Dispatch-ISL-Tokens) and
// for the prompt's block hashes (docs/protocol.md, Block hashes), which the
// engine worker recomputes from the engine's own KV events: both must agree
// token for token, so this package does what vLLM and SGLang do.
//
// # What it does, and its sources
//
//   - Chat: the template is rendered as Hugging Face transformers'
//     apply_chat_template renders it (jinja2, trim_blocks and lstrip_blocks,
//     add_generation_prompt=True, bos_token, eos_token, raise_exception, and
//     its tojson: Python's json.dumps, not jinja2's HTML-safe one; vLLM and
//     SGLang call it), by gonja, a Jinja engine in Go; the result is
//     encoded without the post-processor's special tokens, as vLLM encodes a
//     rendered chat prompt (add_special_tokens=False).
//   - Completion: the prompt is encoded with them (add_special_tokens=True).
//   - Encoding follows the tokenizers library: added tokens are found first,
//     leftmost-longest, in the raw text; the text between them is normalised
//     (NFC when the file says so), split by the pre-tokenizer's pattern,
//     mapped to GPT-2's byte alphabet, and each piece merged by BPE, always
//     the adjacent pair of the lowest merge rank (with ignore_merges, as
//     Llama 3's files have it, a piece in the vocabulary whole is that id).
//
// Supported files: byte-level BPE models (the GPT-2, Qwen2 and Llama 3
// families): a ByteLevel pre-tokenizer with its own regex, or a Split by
// Qwen2's or Llama 3's pattern before it; an NFC normalizer or none; a
// TemplateProcessing or ByteLevel post-processor, a Sequence of the two
// (Llama 3's), or none. Parse refuses
// anything else with ErrUnsupported (a SentencePiece model, another
// pattern, byte fallback), and the gateway estimates instead.
//
// The split patterns need a lookahead ((?!\S)) that Go's regexp lacks;
// pretok.go matches each alternative by hand. github.com/sugarme/tokenizer,
// the Go port of the tokenizers library, compiles those patterns with Go's
// regexp and panics on them; that is why this package has its own BPE.
//
// # Proof
//
// testdata holds a small tokenizer.json (made by make_tokenizer.py) and a
// chat template, cases, and the reference ids of each case (vectors.json):
// rendered by jinja2 as transformers renders them (render.py) and encoded by
// the Hugging Face tokenizers library itself (encode.js, with the npm package
// of the library's Rust code), for Qwen2's pattern and, by variants.js,
// GPT-2's, Llama 3's, and Llama 3's file layout (ignore_merges, the Sequence
// post-processor). tokenizer_test.go asserts every id; bpe_test.go holds the
// merging and the added-token search to their quadratic definitions, and
// pyjson_test.go tojson to transformers'.
//
// # Cost and concurrency
//
// A Tokenizer is safe for concurrent use. Render allocates per call. Encode
// costs O(n log n) in the text's bytes whatever the text: BPE merges a piece
// (a word, but also a run of spaces or of one letter) through a heap, as the
// Hugging Face library does, and added tokens are found by one walk of a
// trie (BenchmarkEncodeLongPiece: 256 KiB of spaces in about 0.13 s, 32 KiB
// 13 ms, where rescanning every pair took 11 s). The ids of the first
// 100,000 pieces of at most 256 bytes are cached, each piece copied.
package tokenizer
