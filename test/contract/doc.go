// Package contract holds tests that both sides of the protocol agree: what
// the worker side encodes (package workerkit, mockworker, loadgen), the
// dispatcher side decodes (package workers, kvindex, ingest), and the other
// way round. They live here, not in either side's packages, because no
// worker-side package may import the dispatcher's (docs/architecture.md).
package contract
