// Package fakeengine is a test double of a vLLM (or SGLang) server, written
// from their source (the files are cited where each behaviour is modelled):
// the OpenAI-compatible endpoints, /health, /metrics with the engines' metric
// names, /tokenize, /v1/models, SGLang's /get_server_info, and KV cache
// events over ZMQ PUB in the engines' msgpack layouts, with the replay
// ROUTER socket. It is not an engine: its model is small on purpose.
//
// # Model
//
// A prompt is tokenized by a toy tokenizer (tokenize.go): one id per word,
// with the markers of a chat template. Its full blocks of Config.BlockSize
// tokens are hashed as vLLM hashes them (sha256 of the parent hash and the
// block's tokens, vllm/v1/core/kv_cache_utils.py hash_block_tokens; the
// low 64 bits as ints, vLLM's default, or the bytes with Config.ByteHashes
// as VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 does) and looked up in a prefix
// cache of Config.NumGPUBlocks blocks with LRU eviction (a finished
// request's blocks are freed last block first, as vLLM's free queue does, so
// children are evicted before their parents). The longest cached prefix is
// a hit; the rest is stored, which publishes one BlockStored per request
// and one BlockRemoved per eviction.
//
// At most Config.MaxNumSeqs requests run; the rest wait in FIFO order. A
// running request prefills its uncached tokens at Config.PrefillTokensPerSec,
// then emits one output token every Config.DecodePerToken (max_tokens of the
// request, default 16).
//
// # Faults
//
// [Engine.Hang] makes every HTTP request block without an answer (the TCP
// connection is accepted), as a wedged engine does; [Engine.Restart] empties
// the cache, starts the event sequence again at 0 (a new process) and
// optionally publishes AllBlocksCleared; [Engine.DropEvents] skips the
// publication of the next n batches (they stay in the replay buffer), so a
// subscriber sees a gap.
//
// An Engine is safe for concurrent use.
package fakeengine
