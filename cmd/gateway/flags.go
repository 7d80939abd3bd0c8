package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"fairdispatch/caller"
	"fairdispatch/internal/cli"
	"fairdispatch/naming"
)

// settings are the flags of docs/config.md, Gateway.
type settings struct {
	config                                      string
	listen, adminAddr                           string
	natsURL, responsePrefix                     string
	conn                                        cli.NATSClient // --nats-creds and the other ways to authenticate, --nats-inbox-prefix
	maxBody                                     int64
	maxHeaderBytes, maxConns                    int
	maxDepth, maxMessages                       int
	readHeaderTimeout, readTimeout, idleTimeout time.Duration
	writeTimeout, requestTimeout, attachWait    time.Duration
	publishTimeout, brokenAfter, healthInterval time.Duration
	log                                         cli.Logging // --log-level, --log-format
	healthProbe, checkConfig                    string
	version                                     bool
}

func newFlags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&s.config, "config", "", "the gateway file: models (each a pool's subject prefix) and tenants (API key digests, classes, defaults); required")
	fs.StringVar(&s.listen, "listen", "127.0.0.1:8000", "host:port of the OpenAI API")
	fs.StringVar(&s.adminAddr, "admin-addr", "127.0.0.1:8081", "host:port of /healthz, /readyz and /metrics (empty: off)")
	fs.StringVar(&s.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	s.conn.Flags(fs)
	fs.StringVar(&s.responsePrefix, "response-prefix", caller.DefaultResponsePrefix, "prefix of the response subjects <prefix>.<request id>; the same on every gateway, so a retry attaches from any")
	fs.Int64Var(&s.maxBody, "max-body-bytes", 896<<10, "largest request body in bytes (over it: 413); keep it at least 128 KiB under the NATS server's max_payload (block hashes take up to 96 KiB of headers)")
	fs.IntVar(&s.maxHeaderBytes, "max-header-bytes", 16<<10, "largest request header block in bytes (over it: 431)")
	fs.IntVar(&s.maxConns, "max-connections", 4096, "most client connections open at once; further ones wait in the listen backlog")
	fs.IntVar(&s.maxDepth, "max-json-depth", 32, "deepest nesting of JSON arrays and objects in a body (over it: 400)")
	fs.IntVar(&s.maxMessages, "max-messages", 4096, "most chat messages (or prompts) in a request (over it: 400)")
	fs.DurationVar(&s.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send its request headers, and an idle connection its next request's")
	fs.DurationVar(&s.readTimeout, "read-timeout", 30*time.Second, "time a client has to send a whole request, body included (then 408 or the connection closes)")
	fs.DurationVar(&s.idleTimeout, "idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
	fs.DurationVar(&s.writeTimeout, "write-timeout", 30*time.Second, "time each write to a client may take; a slower client is dropped and its request cancelled")
	fs.DurationVar(&s.requestTimeout, "request-timeout", 10*time.Minute, "longest a request may take from arrival to its last chunk (then 504, or an error event)")
	fs.DurationVar(&s.attachWait, "attach-wait", 10*time.Second, "how long a request JetStream deduplicated (same Idempotency-Key) waits to hear of the first attempt before 409")
	fs.DurationVar(&s.publishTimeout, "publish-timeout", 5*time.Second, "how long to wait for JetStream to acknowledge a request (then 503: not accepted)")
	fs.DurationVar(&s.brokenAfter, "broken-after", caller.DefaultBrokenAfter, "silence from a worker, after its first chunk, that breaks a response (three ping intervals)")
	fs.DurationVar(&s.healthInterval, "health-interval", 2*time.Second, "how often each pool's dispatcher is checked for /readyz and for refusing requests at once")
	s.log.Flags(fs)
	fs.StringVar(&s.healthProbe, "health-probe", "", "GET this URL, exit 0 on HTTP 200 and 1 otherwise: a container healthcheck without a shell")
	fs.StringVar(&s.checkConfig, "check-config", "", "validate this gateway file, print its models and tenants, and exit")
	fs.BoolVar(&s.version, "version", false, "print the version and exit (no environment variable)")
	return fs
}

// envPrefix starts the name of every flag's environment variable.
const envPrefix = "GATEWAY"

// noEnv are the flags without an environment variable.
var noEnv = map[string]bool{"version": true}

// EnvName is the environment variable of a flag: GATEWAY_<FLAG>, upper case, - as _.
func EnvName(flag string) string { return cli.EnvName(envPrefix, flag) }

// parseSettings parses args, then fills every flag not given from GATEWAY_<FLAG>.
func parseSettings(args []string, env func(string) (string, bool), stderr io.Writer) (*settings, error) {
	return cli.ParseSettings(newFlags, (*settings).validate, args, envPrefix, env, noEnv, stderr)
}

func (s *settings) validate() error {
	var bad []string
	if s.config == "" && s.checkConfig == "" && s.healthProbe == "" && !s.version {
		bad = append(bad, "--config: required")
	}
	if s.maxBody < 1 || s.maxHeaderBytes < 1 || s.maxConns < 1 || s.maxDepth < 1 || s.maxMessages < 1 {
		bad = append(bad, "--max-body-bytes, --max-header-bytes, --max-connections, --max-json-depth and --max-messages must be >= 1")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--read-header-timeout", s.readHeaderTimeout}, {"--read-timeout", s.readTimeout}, {"--idle-timeout", s.idleTimeout},
		{"--write-timeout", s.writeTimeout}, {"--request-timeout", s.requestTimeout}, {"--attach-wait", s.attachWait},
		{"--publish-timeout", s.publishTimeout}, {"--broken-after", s.brokenAfter}, {"--health-interval", s.healthInterval}} {
		if d.v <= 0 {
			bad = append(bad, fmt.Sprintf("%s %v: want > 0", d.name, d.v))
		}
	}
	if s.responsePrefix == "" || !naming.ValidSubject(s.responsePrefix) {
		bad = append(bad, fmt.Sprintf("--response-prefix %q: want a literal subject", s.responsePrefix))
	}
	if s.conn.InboxPrefix == "" || !naming.ValidSubject(s.conn.InboxPrefix) {
		bad = append(bad, fmt.Sprintf("--nats-inbox-prefix %q: want a literal subject", s.conn.InboxPrefix))
	}
	if err := s.log.Check(); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}
