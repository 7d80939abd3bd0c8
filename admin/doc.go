// Package admin is the dispatcher's HTTP admin API (docs/config.md, Admin HTTP API): the busy
// thresholds read and changed at run time, Prometheus metrics, liveness,
// readiness and a debug view of the queues.
//
// It is an adapter: it decides nothing. Reads come from immutable snapshots the
// queue actor publishes ([Control.Thresholds], [Control.Queues]); a threshold
// change is handed to the actor ([Control.SetThresholds]), which applies it and
// re-checks every queue (docs/design.md, When queues are re-checked).
//
// # Routes
//
//	GET  /busy_threshold   the three thresholds, null where unset
//	POST /busy_threshold   change some (write route: bearer token if configured)
//	GET  /metrics          Prometheus exposition of Config.Gatherer
//	GET  /healthz          200 {"status":"ok"} while the process serves
//	GET  /readyz           200 {"status":"ready"} or 503 {"status":"not ready","reason":...}
//	GET  /debug/queues     200, Control.Queues() as JSON
//	GET  /ui               200, the status page (ui.go, ui.html), which polls /debug/queues
//
// Every GET route also answers HEAD. Any other method gets 405 with an Allow
// header; an unknown path gets 404. Every error body is {"error": "..."}, with a
// message naming the problem, and every admin response is application/json
// except /metrics and /ui (text/html under a Content-Security-Policy that
// admits only the page's own script and fetches from this server).
//
// # POST /busy_threshold
//
// The body is one JSON object whose keys are any of
// active_decode_blocks_threshold (a finite number >= 0, a fraction of
// total_kv_blocks), active_prefill_tokens_threshold (an integer in [0, 2^40],
// tokens) and active_prefill_tokens_threshold_frac (a finite number >= 0, a
// fraction of max_num_batched_tokens). A key given with a value sets that
// threshold, a key given as null clears it, an absent key keeps its value; {}
// changes nothing. The answer is 200 with all three thresholds now in force.
// The request is checked in this order, and the first failure answers:
//
//	401  a token is configured and Authorization is not "Bearer <token>"
//	     (scheme case-insensitive; WWW-Authenticate: Bearer is set)
//	415  Content-Type missing, not application/json, or with a parameter
//	     other than charset=utf-8
//	413  body over 64 KiB (MaxBodyBytes)
//	400  empty body, invalid JSON, trailing data after the value, not an
//	     object, a duplicate or unknown key, or a bad value; every key and value
//	     problem is reported in one message, and nothing is applied
//	503  the queue actor did not confirm the change within ApplyTimeout (or
//	     the dispatcher is stopping); the change may or may not have been
//	     applied, GET tells
//
// Decisions where docs/config.md, Admin HTTP API is silent:
//   - The tokens threshold must be written as an integer: 1.5, 1.0 and 1e3 are
//     all 400 (a token count; every JSON encoder writes an integer as digits).
//   - Fractions have no upper bound: a value above 1 is legal and means the
//     threshold can never be exceeded by a consistent report. -0 is stored as 0.
//   - Duplicate keys are 400 rather than "last wins".
//   - Posts are serialised inside admin (read current, merge, apply), so two
//     concurrent partial updates cannot lose each other's keys.
//   - The answer shows the thresholds admin applied, not a re-read snapshot,
//     which the actor may publish a moment later.
//   - Only POST /busy_threshold is a write route; every GET, /debug/queues
//     included, is open. The default address is loopback only; listening
//     beyond it without a token logs a warning at Start.
//   - The token is compared after hashing both sides with SHA-256, with
//     crypto/subtle.ConstantTimeCompare, so neither content nor length leaks
//     through timing. Refusals are logged (method, path, remote address),
//     never the token or the Authorization header.
//
// # Server
//
// [Server.Start] binds synchronously (so a taken port is an error at start-up)
// and serves in the background; [Server.Shutdown] drains it. The http.Server
// has ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout and
// MaxHeaderBytes set (see the constants). A panic in a Control method is
// recovered, logged and answered 500. Logs carry component=admin.
//
// # Concurrency
//
// A Server is safe for concurrent use; the Control's methods are called from
// many handler goroutines at once.
package admin
