package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestConsoleLogsPlainOffTerminal: console logs written to a pipe or file carry
// no colour codes, and durations carry their unit.
func TestConsoleLogsPlainOffTerminal(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger(&b, "info", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("retry_in", 1500*time.Millisecond).Msg("hello")
	if strings.Contains(b.String(), "\x1b[") {
		t.Errorf("console log off a terminal has colour codes: %q", b.String())
	}
	if !strings.Contains(b.String(), "retry_in=1.5s") {
		t.Errorf("duration without its unit: %q", b.String())
	}
	b.Reset()
	log, _ = NewLogger(&b, "info", "json")
	log.Info().Dur("retry_in", 1500*time.Millisecond).Msg("hello")
	if !strings.Contains(b.String(), `"retry_in":"1.5s"`) {
		t.Errorf("json duration without its unit: %q", b.String())
	}
}

// TestNATSAuth: the seven flags, with the environment; an option for each
// way given; an unreadable nkey seed named by its flag.
func TestNATSAuth(t *testing.T) {
	var a NATSAuth
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a.Flags(fs)
	env := map[string]string{"X_NATS_USER": "u", "X_NATS_PASSWORD": "p", "X_NATS_TLS_CA": "ca.pem"}
	if err := Parse(fs, []string{"--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, "X",
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil); err != nil {
		t.Fatal(err)
	}
	want := NATSAuth{User: "u", Password: "p", TLSCA: "ca.pem", TLSCert: "c.pem", TLSKey: "k.pem"}
	if a != want {
		t.Fatalf("got %+v, want %+v", a, want)
	}
	for _, name := range []string{"nats-creds", "nats-nkey", "nats-user", "nats-password", "nats-tls-ca", "nats-tls-cert", "nats-tls-key"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
	if opts, err := a.Options(); err != nil || len(opts) != 3 { // user, CA, client certificate
		t.Errorf("options: %d, %v; want 3", len(opts), err)
	}
	if opts, err := (NATSAuth{}).Options(); err != nil || len(opts) != 0 {
		t.Errorf("no auth: %d options, %v; want none", len(opts), err)
	}
	if _, err := (NATSAuth{NKey: filepath.Join(t.TempDir(), "missing.nk")}).Options(); err == nil || !strings.Contains(err.Error(), "--nats-nkey") {
		t.Errorf("missing nkey seed: %v, want an error naming --nats-nkey", err)
	}
}

// TestNATSClient: NATSAuth's flags and --nats-inbox-prefix; the default
// prefix adds no option, another one sets the connection's inbox prefix.
func TestNATSClient(t *testing.T) {
	var c NATSClient
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Flags(fs)
	if err := fs.Parse([]string{"--nats-user", "u"}); err != nil {
		t.Fatal(err)
	}
	if opts, err := c.Options(); err != nil || len(opts) != 1 || c.InboxPrefix != "_INBOX" {
		t.Fatalf("defaults: %d options, %v, prefix %q; want the user's only, prefix _INBOX", len(opts), err, c.InboxPrefix)
	}
	if err := fs.Parse([]string{"--nats-inbox-prefix", "_INBOX_worker_w1"}); err != nil {
		t.Fatal(err)
	}
	opts, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	o := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			t.Fatal(err)
		}
	}
	if o.InboxPrefix != "_INBOX_worker_w1" || o.User != "u" {
		t.Errorf("options set inbox prefix %q, user %q; want _INBOX_worker_w1, u", o.InboxPrefix, o.User)
	}
}

// TestParseErrors: -h is flag.ErrHelp, a bad flag a ParseError (exit 2,
// printed by the flag package), a bad environment value an *EnvError naming
// the variable, and the exit statuses follow.
func TestParseErrors(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("wait", time.Second, "")
		return fs
	}
	noEnv := func(string) (string, bool) { return "", false }
	var stderr bytes.Buffer
	if err := Parse(newFS(), []string{"-h"}, "X", noEnv, nil); !errors.Is(err, flag.ErrHelp) || ParseExit("x", err, &stderr) != 0 {
		t.Errorf("-h: %v", err)
	}
	err := Parse(newFS(), []string{"--nope"}, "X", noEnv, nil)
	var pe ParseError
	if !errors.As(err, &pe) || ParseExit("x", err, &stderr) != 2 || stderr.Len() != 0 {
		t.Errorf("unknown flag: %v, stderr %q", err, stderr.String())
	}
	err = Parse(newFS(), nil, "X", func(k string) (string, bool) { return "soon", k == "X_WAIT" }, nil)
	var ee *EnvError
	if !errors.As(err, &ee) || ee.Name != "X_WAIT" || ParseExit("x", err, &stderr) != 2 || !strings.Contains(stderr.String(), `x: environment X_WAIT="soon"`) {
		t.Errorf("bad environment value: %v, stderr %q", err, stderr.String())
	}
	if err := Parse(newFS(), nil, "X", func(k string) (string, bool) { return "soon", true }, map[string]bool{"wait": true}); err != nil {
		t.Errorf("a flag without a variable read one: %v", err)
	}
}

// TestParseSettings: the flags fill a new settings value from the command
// line and the environment, the validation's verdict comes back with it, and
// --log-format is checked.
func TestParseSettings(t *testing.T) {
	type settings struct {
		wait time.Duration
		log  Logging
	}
	flags := func(s *settings) *flag.FlagSet {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.DurationVar(&s.wait, "wait", time.Second, "")
		s.log.Flags(fs)
		return fs
	}
	validate := func(s *settings) error { return s.log.Check() }
	env := func(k string) (string, bool) { return "json", k == "X_LOG_FORMAT" }
	s, err := ParseSettings(flags, validate, []string{"--wait", "2s"}, "X", env, nil, io.Discard)
	if err != nil || s.wait != 2*time.Second || s.log != (Logging{Level: "info", Format: "json"}) {
		t.Fatalf("got %+v, %v", s, err)
	}
	if _, err := ParseSettings(flags, validate, []string{"--log-format", "xml"}, "X", env, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v, want an error naming the flag", err)
	}
	var stderr bytes.Buffer
	if _, err := ParseSettings(flags, validate, []string{"--nope"}, "X", env, nil, &stderr); !errors.As(err, new(ParseError)) || !strings.Contains(stderr.String(), "nope") {
		t.Errorf("--nope: %v, stderr %q; want a ParseError printed on stderr", err, stderr.String())
	}
}

// TestParseCommandLine: --version is reported (and printed), a positional
// argument refused.
func TestParseCommandLine(t *testing.T) {
	defer func(args []string, fs *flag.FlagSet) { os.Args, flag.CommandLine = args, fs }(os.Args, flag.CommandLine)
	for _, c := range []struct {
		args      []string
		versioned bool
		fails     bool
	}{{[]string{"--version"}, true, false}, {[]string{"extra"}, false, true}, {nil, false, false}} {
		os.Args = append([]string{"x"}, c.args...)
		flag.CommandLine = flag.NewFlagSet("x", flag.ContinueOnError)
		versioned, err := ParseCommandLine("x")
		if versioned != c.versioned || (err != nil) != c.fails {
			t.Errorf("%v: versioned %v, error %v", c.args, versioned, err)
		}
	}
}
