// Package engineworker is a fairdispatch worker in front of one vLLM or SGLang
// server: it turns dispatches into requests to the engine's OpenAI-compatible
// HTTP API, reports the engine's load from its Prometheus metrics, settles
// costs from the engine's usage, and relays the engine's ZMQ KV cache events
// as fairdispatch KV cache events (docs/protocol.md, KV cache events), with
// block hashes recomputed from the events' token ids (docs/protocol.md,
// Block hashes). It is built on package workerkit and imports wire and
// naming, never the dispatcher's packages.
//
// # Translations, one file a direction
//
//   - kvdecode.go: the engine's msgpack batches (every layout vLLM's
//     vllm/distributed/kv_events.py and SGLang's
//     python/sglang/srt/disaggregation/kv_events.py have had) to [Batch].
//   - kvtranslate.go: [Batch] to fairdispatch cache changes, the hashes
//     chained through a map from the engine's block hash to ours.
//   - metrics.go: the engine's Prometheus text (vllm/v1/metrics/loggers.py,
//     python/sglang/srt/metrics/collector.py) to load report fields.
//   - engineclient.go: a dispatch to an HTTP request to the engine, and the
//     engine's response (vllm/entrypoints/openai/serving_chat.py) back.
package engineworker
