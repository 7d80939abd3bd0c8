// Package livepolicy keeps the live policy (docs/design.md, Live policy): the
// policy YAML in the JetStream key-value bucket of the deployment
// (naming.Names.PolicyBucket, "fairdispatch_policy" for the default prefix),
// key "policy".
//
// At start a dispatcher seeds the key from --policy-config when it has no
// revision (create if absent: a running deployment's policy is never
// overwritten by a restart) and starts with its current revision (Start);
// then a Follower watches the key. Every new revision is validated exactly as
// `dispatcher --check-config` does (configs.Parse): a valid one is handed to
// the queue actor, which applies it between two arbitration calls; an invalid
// one, or a delete of the key, is refused: the last good policy stays, and
// the refusal is logged with its revision and counted. Every dispatcher,
// leader or standby, follows the key, so a standby that takes over already
// runs the newest valid policy.
//
// The Store is also what fairctl's policy commands use: Put validates before
// it stores, History lists the kept revisions (History, 64), At reads one.
//
// A policy is one message: its YAML must fit the server's max_payload (1 MiB
// by default, docs/config.md, Live policy).
//
// A Store is safe for concurrent use; a Follower runs on one goroutine.
package livepolicy
