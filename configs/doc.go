// Package configs loads and validates the dispatcher's policy configuration
// (docs/config.md, Policy YAML) and converts it into plain Go types: a Policy holding the
// uncached-ISL buckets and the physical policy classes, in file order (the
// DRR ring order), with their defaults applied. It also resolves a request's
// class (docs/design.md, Class resolution) and renders the class matrix for `dispatcher --check-config`.
//
// The example policies policy-classes.yaml and policy-cached-uncached.yaml
// beside this file are the seed documents' examples, unchanged; a test loads
// every *.yaml file of this directory.
//
// # Schema
//
//	default_policy_family: <family>          # a configured family
//	uncached_isl_buckets:                    # non-empty
//	  - min_tokens: 0                        # first is 0, then strictly increasing
//	    bucket: <name>                       # unique
//	policy_classes:                          # non-empty; file order is the DRR ring order
//	  - name: <class>                        # required, unique
//	    policy_family: <family>              # with cache_bucket, or neither
//	    cache_bucket: <bucket>               #   (neither: an explicit class)
//	    queue_policy: fcfs | wspt            # default fcfs
//	    quantum: <uint>                      # required, in tokens, 1 .. 2^40
//	    prefill_busy_threshold: <uint>       # tokens, 0 .. 2^40
//	    prefill_busy_threshold_frac: <float> # finite, >= 0
//	    busy_worker_ratio: <float>           # (0, 1], needs one of the two thresholds
//	    request_queue_limit_per_worker: <uint>       # requests, 0 .. 2^40
//	    raw_isl_token_queue_limit_per_worker: <uint> # tokens, 0 .. 2^40
//	    cached_token_queue_limit_per_worker: <uint>  # tokens, 0 .. 2^40
//
// Every family has exactly one class per bucket; no two classes share a name
// or a (family, bucket) pair; an explicit class's name is not a family's
// name. Class, family and bucket names are subject tokens: [A-Za-z0-9_-]+, at
// most 128 bytes. A class queues (Class.Queues) when either prefill busy
// threshold is set, 0 included; otherwise it dispatches at once or fails.
//
// # Strictness and errors
//
// The file is decoded into a yaml.Node tree and walked by hand, so every
// problem is reported at once, each with its YAML path and line, in a
// *ValidationError whose Error() gives one line per problem:
//
//	policy.yaml:12: policy_classes[1].quantum: must be > 0
//
// Unknown and repeated keys are problems at every level; the file must hold
// exactly one YAML document; an empty file (or one with only comments, or a
// null document) is a problem. Types are strict: an integer field takes a
// YAML integer only (no floats such as 1e3 or 2.0, no quoted numbers, no
// negatives); a float field takes an integer or a float, finite; a name takes
// a string only (quote a name that YAML would read as a number or a boolean,
// such as "123" or "true"). Null is never accepted: leave an optional field
// out to leave it unset. Aliases are followed; merge keys (<<) are unknown
// fields. A YAML syntax error is reported as a single problem with the
// decoder's line (the decoder's own, which can point at the start of the
// enclosing construct; 0 when it gives none). Checks that depend on a part already in error are skipped,
// so one mistake is reported once (for example, a bucket list with a problem
// suppresses the "unknown bucket" and "missing class for bucket" checks).
//
// # Decisions where the specification is silent
//
//   - A document with none of default_policy_family, uncached_isl_buckets and
//     policy_classes is an error ("no policy: ..."), not the synthetic
//     profile: the synthetic profile comes from Default, used when no
//     --policy-config is given. A file that was given but says nothing is
//     more likely a mistake than a wish for the defaults.
//   - Some but not all of the three top-level keys: each missing one is a
//     problem.
//   - Every unsigned integer (quantum, min_tokens, thresholds, limits) is at
//     most MaxTokens (2^40), so a per-worker limit times any plausible number
//     of workers cannot overflow a uint64.
//   - prefill_busy_threshold_frac has no upper bound beyond being finite.
//   - busy_worker_ratio "needs a threshold" means the key of either
//     threshold is present in the same class.
//   - queue_policy is case-sensitive (fcfs or wspt).
//   - Default family × bucket classes: the default family must have a class
//     for every bucket like any other family, so every request resolves.
//   - Problems are listed in line order; problems on the same line keep the
//     order they were found in.
//
// # Resolution
//
// Policy.Resolve follows docs/design.md, Class resolution: an explicit class's name selects it;
// otherwise a family's name selects that family, and any other token (an
// unknown one, or the name of a family × bucket class) selects
// default_policy_family; the bucket is the one with the largest
// min_tokens <= uncached tokens. Cost: two map lookups and a binary search,
// O(log buckets), no allocation. The synthetic profile (Default) always
// resolves to its single class "default".
//
// # Concurrency
//
// Parse, Load and Default are safe for concurrent use. A Policy is not
// modified after construction: concurrent reads (Resolve, Index, Matrix) are
// safe; callers must not modify its slices.
package configs
