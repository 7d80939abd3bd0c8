package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"fairdispatch/admin"
	"fairdispatch/bus"
	"fairdispatch/ingest"
	"fairdispatch/internal/cli"
	"fairdispatch/kvindex"
	"fairdispatch/leader"
	"fairdispatch/naming"
	"fairdispatch/recorder"
	"fairdispatch/scheduler"
)

// settings are every setting of docs/config.md, Flags and environment, plus the few this program adds.
type settings struct {
	natsURL, dataDir, storage, natsListen, natsSync           string
	auth                                                      cli.NATSAuth // --nats-creds and the other ways to authenticate
	inboxPrefix                                               string
	policy, prefix, httpAddr, adminToken                      string
	replicas                                                  int
	natsMaxStore                                              int64 // --nats-max-file-store, bytes
	decodeBlocks, prefillTokensFrac, queueThreshold           optFloat
	prefillTokens                                             optUint
	queuePolicy                                               string
	ackWait, dispatchTimeout, dupWindow, grace                time.Duration
	noWorkersTimeout                                          time.Duration
	blockSize, temperature, overlapCredit, prefillScale, decW float64
	maxHeld, inFlight, maxWorkers                             int
	maxKeysPerClass                                           int
	log                                                       cli.Logging // --log-level, --log-format
	checkConfig, healthProbe                                  string
	election, pprof                                           bool
	leaseTTL                                                  time.Duration
	instanceID                                                string
	demo                                                      bool
	demoPerClass                                              int
	demoScenario                                              string
	demoGatewayConfig, demoGatewayAddr                        string
	record                                                    string // --record FILE
	recordStream                                              bool
	recordStreamBytes                                         int64
	recordBuffer                                              int
	kvIndex                                                   bool
	kvWeights                                                 string
	kvMaxBlocks                                               int
	kvMaxAge                                                  time.Duration
	version                                                   bool
}

// optFloat is a float flag that may be unset.
type optFloat struct{ v *float64 }

func (o *optFloat) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatFloat(*o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return fmt.Errorf("want a finite number >= 0")
	}
	o.v = &f
	return nil
}

// optUint is an unsigned integer flag that may be unset.
type optUint struct{ v *uint64 }

func (o *optUint) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatUint(*o.v, 10)
}

func (o *optUint) Set(s string) error {
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil || u > 1<<40 {
		return fmt.Errorf("want an integer in [0, 2^40]")
	}
	o.v = &u
	return nil
}

func newFlags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	fs.StringVar(&s.natsURL, "nats-url", "", "NATS server URL; empty: start an embedded nats-server with JetStream in --data-dir")
	fs.StringVar(&s.natsListen, "nats-listen", "127.0.0.1:4222", "host:port the embedded nats-server listens on (only without --nats-url)")
	fs.StringVar(&s.dataDir, "data-dir", "./data", "JetStream storage directory of the embedded server")
	fs.StringVar(&s.storage, "stream-storage", "file", "stream storage: file or memory")
	fs.StringVar(&s.natsSync, "nats-sync", bus.DefaultSync.String(), "how the embedded nats-server syncs JetStream writes to disk: always (before acknowledging each; nothing acknowledged is lost to a power cut) or a period such as 1s (faster; up to that period of acknowledged writes lost to a power cut); only without --nats-url (docs/deployment.md, Durability)")
	fs.Int64Var(&s.natsMaxStore, "nats-max-file-store", 0, "the embedded nats-server's JetStream file store limit in bytes (its max_file_store; 0: nats-server's default, 75% of the free disk space at start); at it every stream and file bucket refuses writes (docs/operations.md, When storage runs out); only without --nats-url")
	s.auth.Flags(fs)
	fs.StringVar(&s.inboxPrefix, "nats-inbox-prefix", "_INBOX", "prefix of this dispatcher's reply subjects; one per pool lets permissions keep pools on one account out of each other's inboxes")
	fs.StringVar(&s.policy, "policy-config", "", "policy YAML file; empty: one class \"default\" from --queue-policy and --queue-threshold")
	fs.StringVar(&s.prefix, "subject-prefix", naming.DefaultPrefix, "prefix of every subject; the streams and buckets are named after it (docs/config.md)")
	fs.IntVar(&s.replicas, "stream-replicas", 1, "replicas of every stream (1 to 5)")
	fs.StringVar(&s.httpAddr, "http-addr", admin.DefaultAddr, "admin HTTP listen address")
	fs.StringVar(&s.adminToken, "admin-token", "", "bearer token guarding the admin write routes; empty: unguarded")
	fs.Var(&s.decodeBlocks, "active-decode-blocks-threshold", "overload when kv_used or active_decode blocks exceed this fraction of total_kv_blocks (unset: off)")
	fs.Var(&s.prefillTokens, "active-prefill-tokens-threshold", "overload when active prefill tokens exceed this (unset: off)")
	fs.Var(&s.prefillTokensFrac, "active-prefill-tokens-threshold-frac", "overload when active prefill tokens exceed this fraction of max_num_batched_tokens (unset: off)")
	fs.Var(&s.queueThreshold, "queue-threshold", "without --policy-config: the default class queues when prefill exceeds this fraction of max_num_batched_tokens (unset: no queueing)")
	fs.StringVar(&s.queuePolicy, "queue-policy", "fcfs", "without --policy-config: fcfs or wspt")
	fs.DurationVar(&s.ackWait, "ack-wait", ingest.DefaultAckWait, "request consumer ack wait")
	fs.DurationVar(&s.dispatchTimeout, "dispatch-timeout", 2*time.Second, "how long a worker may take to accept or refuse")
	fs.DurationVar(&s.dupWindow, "duplicate-window", bus.DefaultDuplicateWindow, "JetStream duplicate window of every stream")
	fs.Float64Var(&s.blockSize, "block-size", 16, "tokens per KV block in worker scoring (> 0)")
	fs.Float64Var(&s.temperature, "router-temperature", 0, "worker selection temperature (>= 0; 0: lowest cost)")
	fs.Float64Var(&s.overlapCredit, "overlap-score-credit", 1, "credit per cached block in worker scoring")
	fs.Float64Var(&s.prefillScale, "prefill-load-scale", 1, "weight of prefill load in worker scoring")
	fs.Float64Var(&s.decW, "decode-active-request-weight", 0, "weight of active requests in worker scoring")
	fs.DurationVar(&s.grace, "startup-grace", 3*time.Second, "wait this long for load reports before dispatching or failing anything")
	fs.DurationVar(&s.noWorkersTimeout, "no-workers-timeout", 0, "fail the held requests as no_endpoints once no worker has been live this long (0: hold them until a worker reports)")
	fs.BoolVar(&s.kvIndex, "kv-index", false, "keep an index of the workers' KV caches from the <Q>_KV stream and score requests carrying Dispatch-Block-Hashes by it")
	fs.StringVar(&s.kvWeights, "kv-tier-weights", "device=1,host=0.75,disk=0.5,shared=0.5", "with --kv-index: each cache tier's weight per block, in [0, 1]")
	fs.IntVar(&s.kvMaxBlocks, "kv-max-blocks", kvindex.DefaultMaxBlocks, "with --kv-index: most (rank, block) pairs in the index (>= 1); past it the largest rank is dropped and resynchronised")
	fs.DurationVar(&s.kvMaxAge, "kv-max-age", bus.DefaultKVMaxAge, "max age of the <Q>_KV stream when the dispatcher creates it (> 0)")
	fs.IntVar(&s.maxHeld, "max-held", 100000, "most requests held in memory at once")
	fs.IntVar(&s.inFlight, "max-in-worker", 0, "room in the consumer's ack-pending limit for requests accepted by workers and not finished (0: 4 x --max-held)")
	fs.IntVar(&s.maxWorkers, "max-workers", 10000, "most live workers; reports from further new workers are dropped and counted")
	fs.IntVar(&s.maxKeysPerClass, "max-keys-per-class", scheduler.DefaultMaxKeysPerClass, "most fairness keys a class tracks at once (backlogged or owed a settlement); further new keys share the key _overflow")
	s.log.Flags(fs)
	fs.BoolVar(&s.election, "leader-election", true, "run as one of any number of dispatchers: dispatch only while holding the lease in the KV bucket fairdispatch_leader (fairdispatch_<prefix>_leader for another --subject-prefix)")
	fs.DurationVar(&s.leaseTTL, "lease-ttl", leader.DefaultTTL, "leader lease time (200ms to 1m); a standby takes over within about 1.25 x this after the leader dies")
	fs.StringVar(&s.instanceID, "instance-id", defaultInstanceID(), "this process's id in the leader lease")
	fs.BoolVar(&s.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the admin address")
	fs.StringVar(&s.checkConfig, "check-config", "", "validate this policy file, print the resolved class matrix, and exit")
	fs.StringVar(&s.healthProbe, "health-probe", "", "GET this URL (e.g. http://127.0.0.1:8080/healthz), exit 0 on HTTP 200 and 1 otherwise: a container healthcheck without a shell")
	fs.BoolVar(&s.demo, "demo", false, "also run one mock worker and the seed's premium/regular burst, print a summary, and exit")
	fs.IntVar(&s.demoPerClass, "demo-requests", 320, "with --demo: requests per class")
	fs.StringVar(&s.demoScenario, "demo-scenario", "classes", "with --demo: classes (premium against regular), keys (a flooding tenant against quiet ones in one class; use configs/policy-keys.yaml) or gateway (two tenants through the OpenAI gateway; it keeps serving until stopped)")
	fs.StringVar(&s.demoGatewayConfig, "demo-gateway-config", "configs/gateway-demo.yaml", "with --demo-scenario gateway: the gateway file (docs/config.md, Gateway)")
	fs.StringVar(&s.demoGatewayAddr, "demo-gateway-addr", "127.0.0.1:8000", "with --demo-scenario gateway: the gateway's address")
	fs.StringVar(&s.record, "record", "", "record the traffic trace (arrivals, dispatches, rejections; no bodies) to this file as JSON lines (docs/protocol.md, Trace records)")
	fs.BoolVar(&s.recordStream, "record-stream", false, "record the traffic trace to the stream <Q>_TRACE on <prefix>.trace, created if absent")
	fs.Int64Var(&s.recordStreamBytes, "record-stream-max-bytes", recorder.DefaultStreamMaxBytes, "size limit of the trace stream in bytes when this dispatcher creates it; the oldest records are discarded beyond it")
	fs.IntVar(&s.recordBuffer, "record-buffer", recorder.DefaultBuffer, "records buffered between the queue actor and the trace writer; beyond it records are dropped and counted")
	fs.BoolVar(&s.version, "version", false, "print the version, VCS revision and time, and Go version, and exit (no environment variable)")
	return fs
}

// parseSettings parses args, then fills every flag not given on the command
// line from its environment variable DISPATCHER_<FLAG>.
func parseSettings(args []string, env func(string) (string, bool), stderr io.Writer) (*settings, error) {
	return cli.ParseSettings(newFlags, (*settings).validate, args, envPrefix, env, noEnv, stderr)
}

// envPrefix starts the name of every flag's environment variable.
const envPrefix = "DISPATCHER"

// noEnv are the flags without an environment variable: DISPATCHER_VERSION
// might well be set to a version string in an image, which must not turn the
// dispatcher into a version printer (or fail its start).
var noEnv = map[string]bool{"version": true}

// parseError is a command-line error the flag package has already printed.
type parseError = cli.ParseError

// EnvName is the environment variable of a flag: DISPATCHER_<FLAG>, upper case, - as _.
func EnvName(flag string) string { return cli.EnvName(envPrefix, flag) }

func (s *settings) validate() error {
	var bad []string
	if s.storage != "file" && s.storage != "memory" {
		bad = append(bad, fmt.Sprintf("--stream-storage %q: want file or memory", s.storage))
	}
	if _, err := bus.ParseSync(s.natsSync); err != nil {
		bad = append(bad, fmt.Sprintf("--nats-sync %q: %v", s.natsSync, err))
	}
	if s.natsMaxStore < 0 {
		bad = append(bad, fmt.Sprintf("--nats-max-file-store %d: want >= 0 bytes (0: nats-server's default)", s.natsMaxStore))
	}
	if s.replicas < 1 || s.replicas > 5 {
		bad = append(bad, fmt.Sprintf("--stream-replicas %d: want 1 to 5", s.replicas))
	}
	if s.demoScenario != "classes" && s.demoScenario != "keys" && s.demoScenario != "gateway" {
		bad = append(bad, fmt.Sprintf("--demo-scenario %q: want classes, keys or gateway", s.demoScenario))
	}
	if s.queuePolicy != "fcfs" && s.queuePolicy != "wspt" {
		bad = append(bad, fmt.Sprintf("--queue-policy %q: want fcfs or wspt", s.queuePolicy))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--ack-wait", s.ackWait}, {"--dispatch-timeout", s.dispatchTimeout}, {"--duplicate-window", s.dupWindow}, {"--kv-max-age", s.kvMaxAge}} {
		if d.v <= 0 {
			bad = append(bad, fmt.Sprintf("%s %v: want > 0", d.name, d.v))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--startup-grace", s.grace}, {"--no-workers-timeout", s.noWorkersTimeout}} {
		if d.v < 0 {
			bad = append(bad, fmt.Sprintf("%s %v: want >= 0", d.name, d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--kv-max-blocks", s.kvMaxBlocks}, {"--max-held", s.maxHeld}} {
		if n.v < 1 {
			bad = append(bad, fmt.Sprintf("%s %d: want >= 1", n.name, n.v))
		}
	}
	if _, err := kvindex.ParseWeights(s.kvWeights); err != nil {
		bad = append(bad, fmt.Sprintf("--kv-tier-weights %q: %v", s.kvWeights, err))
	}
	if s.dispatchTimeout >= s.ackWait {
		bad = append(bad, fmt.Sprintf("--dispatch-timeout %v: want below --ack-wait %v", s.dispatchTimeout, s.ackWait))
	}
	if !(s.blockSize > 0) || math.IsInf(s.blockSize, 0) {
		bad = append(bad, fmt.Sprintf("--block-size %v: want a finite number > 0", s.blockSize))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--router-temperature", s.temperature}, {"--overlap-score-credit", s.overlapCredit}, {"--prefill-load-scale", s.prefillScale}, {"--decode-active-request-weight", s.decW}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			bad = append(bad, fmt.Sprintf("%s %v: want a finite number >= 0", f.name, f.v))
		}
	}
	if s.inFlight < 0 || s.maxWorkers < 1 {
		bad = append(bad, "--max-in-worker must be >= 0 and --max-workers >= 1")
	} else if s.maxHeld >= 1 && int64(s.maxHeld)+int64(s.inFlightRoom()) > math.MaxInt32 {
		// The consumer's MaxAckPending; checked here, not when this
		// dispatcher first leads and creates its consumer.
		bad = append(bad, fmt.Sprintf("--max-held %d + --max-in-worker %d (0: 4 x --max-held): want at most 2^31-1 together",
			s.maxHeld, s.inFlight))
	}
	if s.maxKeysPerClass < 1 {
		bad = append(bad, "--max-keys-per-class must be >= 1")
	}
	if s.leaseTTL < 200*time.Millisecond || s.leaseTTL > time.Minute {
		bad = append(bad, fmt.Sprintf("--lease-ttl %v: want 200ms to 1m", s.leaseTTL))
	}
	if s.inboxPrefix == "" || !naming.ValidSubject(s.inboxPrefix) {
		bad = append(bad, fmt.Sprintf("--nats-inbox-prefix %q: want a literal subject", s.inboxPrefix))
	}
	if _, err := naming.New(s.prefix); err != nil {
		bad = append(bad, fmt.Sprintf("--subject-prefix: %v", err))
	}
	if s.recordBuffer < 1 || s.recordStreamBytes < 1 {
		bad = append(bad, fmt.Sprintf("--record-buffer %d, --record-stream-max-bytes %d: want >= 1", s.recordBuffer, s.recordStreamBytes))
	}
	if err := s.log.Check(); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "\n"))
	}
	return nil
}

// defaultInstanceID is host-pid-random: unique per process.
func defaultInstanceID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}
