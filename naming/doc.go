// Package naming derives every NATS name of one fairdispatch deployment from
// its subject prefix (docs/protocol.md, Names; docs/deployment.md, Several
// pools on one NATS account): the subjects, the streams, the durable consumer
// and the key-value buckets. The dispatcher, the worker helper, the mock
// worker, the load generator and the benchmark all build their names here, so
// that the same --subject-prefix gives every one of them the same names.
//
// From a prefix P (one or more dot-separated tokens of [A-Za-z0-9_-]), with Q
// the prefix upper-cased with '.' and '-' turned into '_', and q the lower-case Q:
//
//	subjects   P.req.<class>  P.load.<worker>  P.work.<worker>  P.dlq.<class>  P.done.<worker>  P.trace
//	streams    Q_REQ  Q_DLQ  Q_KV  Q_TRACE (only with --record-stream)
//	durable    dispatcher (scoped by its stream)
//	buckets    fairdispatch_leader, fairdispatch_policy       when q is "dispatch"
//	           fairdispatch_q_leader, fairdispatch_q_policy   otherwise
//
// So the default prefix "dispatch" keeps the names of the first releases, and
// deployments with other prefixes share a NATS account without touching each
// other. Every name is a function of Q alone: two prefixes with the same Q
// ("a.b" and "a_b", "llama" and "LLAMA") name the same streams and buckets and
// must not be used side by side on one account.
//
// A prefix is refused (New returns an error wrapping ErrInvalidPrefix that
// names it and the name it would break) when it is not a literal subject, or
// would make a stream name JetStream refuses (a '.', '*', '>', whitespace or
// path separator, or more than 255 bytes) or a bucket name that is not
// [A-Za-z0-9_-]+ (its stream KV_<bucket> at most 255 bytes). In practice: at
// most 232 bytes of [A-Za-z0-9_-] tokens separated by single dots.
//
// Cost: New is linear in the prefix's length and allocates the five stream
// and bucket names once; their accessors return them without allocating; the
// subject methods (Req, Load...) allocate the one string they return.
//
// The package has no dependencies beyond the standard library, so that the
// worker side (package workerkit and its subpackages) can import it without
// pulling in the dispatcher's adapters. A Names is immutable and safe for
// concurrent use.
package naming
