// Package cli is what the command-line programs under cmd/ share: flags
// backed by environment variables, the logger of --log-level and
// --log-format, --version, and the --health-probe of a container healthcheck. It imports
// neither side's packages, so programs of both sides use it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/internal/buildinfo"
)

// EnvName is the environment variable of a flag: <PREFIX>_<FLAG>, upper
// case, - as _ (DISPATCHER_ACK_WAIT for prefix DISPATCHER, flag ack-wait).
func EnvName(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// EnvError is an environment variable whose value its flag refused.
type EnvError struct {
	Name, Value string
	Err         error
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("environment %s=%q: %v", e.Name, e.Value, e.Err)
}
func (e *EnvError) Unwrap() error { return e.Err }

// FromEnv sets every flag of fs that the command line did not give, and that
// skip does not name, from its environment variable EnvName(prefix, flag),
// when env has it: the command line wins. The first value a flag refuses is
// returned as an *EnvError.
func FromEnv(fs *flag.FlagSet, prefix string, env func(string) (string, bool), skip map[string]bool) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil || skip[f.Name] {
			return
		}
		name := EnvName(prefix, f.Name)
		if v, ok := env(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = &EnvError{Name: name, Value: v, Err: e}
			}
		}
	})
	return err
}

// ParseError is a command-line error the flag package has already printed.
type ParseError struct{ error }

// Parse parses args into fs (which takes no positional arguments), then the
// environment (FromEnv). -h comes back as flag.ErrHelp, an error the flag
// package printed as a ParseError.
func Parse(fs *flag.FlagSet, args []string, prefix string, env func(string) (string, bool), skip map[string]bool) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ParseError{err}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return FromEnv(fs, prefix, env, skip)
}

// ParseSettings reads the settings S of a program that keeps them in one
// struct (the dispatcher, the gateway): flags makes the flag set of a new S,
// whose messages go to stderr; args and then the environment are parsed into
// it (Parse), and validate judges the result, which comes back with its
// verdict. validate names flags (--lease-ttl); where one it names was set by
// its environment variable, the verdict says so, so that the reader knows
// what to change.
func ParseSettings[S any](flags func(*S) *flag.FlagSet, validate func(*S) error, args []string, prefix string, env func(string) (string, bool), skip map[string]bool, stderr io.Writer) (*S, error) {
	s := new(S)
	fs := flags(s)
	fs.SetOutput(stderr)
	if err := Parse(fs, args, prefix, env, skip); err != nil {
		return nil, err
	}
	err := validate(s)
	if err == nil {
		return s, nil
	}
	onLine := map[string]bool{}
	probe := flag.NewFlagSet("", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		probe.Var(inert{ok && b.IsBoolFlag()}, f.Name, "")
	})
	_ = probe.Parse(args) // parsed before: only to see which the arguments set
	probe.Visit(func(f *flag.Flag) { onLine[f.Name] = true })
	var from []string
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(prefix, f.Name)
		if _, ok := env(name); ok && !onLine[f.Name] && !skip[f.Name] && namesFlag(err.Error(), f.Name) {
			from = append(from, "--"+f.Name+" from "+name)
		}
	})
	if len(from) > 0 {
		err = fmt.Errorf("%w (%s)", err, strings.Join(from, ", "))
	}
	return s, err
}

// namesFlag reports whether msg names --flag: the name followed by anything
// but another character of a flag name (--max-held, not --max-held-x).
func namesFlag(msg, flag string) bool {
	for rest := msg; ; {
		i := strings.Index(rest, "--"+flag)
		if i < 0 {
			return false
		}
		rest = rest[i+2+len(flag):]
		if rest == "" {
			return true
		}
		if c := rest[0]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return true
		}
	}
}

// inert is a flag value that takes anything and keeps nothing: it tells which
// flags arguments set without setting them twice.
type inert struct{ boolean bool }

func (inert) String() string     { return "" }
func (inert) Set(string) error   { return nil }
func (v inert) IsBoolFlag() bool { return v.boolean }

// ParseCommandLine parses the command line into the flag package's flags,
// with --version added, for a program that takes no positional arguments.
// With --version it prints program and its build (internal/buildinfo) on
// stdout and reports versioned, and the program exits 0 at once.
func ParseCommandLine(program string) (versioned bool, err error) {
	version := flag.Bool("version", false, "print the version, VCS revision and time, and Go version, and exit")
	flag.Parse()
	if *version {
		fmt.Println(program, buildinfo.Read())
		return true, nil
	}
	if flag.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	return false, nil
}

// ParseExit is the exit status of a program whose settings err refused: 0
// for -h, else 2, with err on stderr after the program's name unless the flag
// package printed it already.
func ParseExit(program string, err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var pe ParseError
	if !errors.As(err, &pe) {
		fmt.Fprintln(stderr, program+":", err)
	}
	return 2
}

// NewLogger is the logger of --log-level (a zerolog level name; empty is
// refused) and --log-format (console or json) writing to w. Console output
// is coloured only when w is a terminal.
func NewLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	// Durations are logged as Go duration strings with their unit ("1.5s"),
	// in both formats (docs/decisions.md, Operations: logs).
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	out := w
	if format == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !IsTerminal(w)}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// Logging is the flags --log-level and --log-format of the dispatcher and
// the gateway (docs/config.md).
type Logging struct{ Level, Format string }

// Flags registers l's flags on fs.
func (l *Logging) Flags(fs *flag.FlagSet) {
	fs.StringVar(&l.Level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&l.Format, "log-format", "console", "console or json")
}

// Check refuses a --log-format other than console or json; the level is
// judged by Logger.
func (l Logging) Check() error {
	if l.Format != "console" && l.Format != "json" {
		return fmt.Errorf("--log-format %q: want console or json", l.Format)
	}
	return nil
}

// Logger is the logger of l writing to w (NewLogger).
func (l Logging) Logger(w io.Writer) (zerolog.Logger, error) {
	return NewLogger(w, l.Level, l.Format)
}

// IsTerminal reports whether w is a terminal: colour codes only go there.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ProbeTimeout bounds one health probe.
const ProbeTimeout = 3 * time.Second

// Probe is --health-probe: GET url; nil on HTTP 200, else the reason. The
// distroless images have no shell or curl, so their container healthchecks
// run the program's binary itself (docker-compose.yml).
func Probe(url string) error {
	c := &http.Client{Timeout: ProbeTimeout}
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("health probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health probe: %s: %s %s", url, resp.Status, body)
	}
	return nil
}

// ProbeExit is Probe as an exit status: 0 on HTTP 200, else 1 with the
// reason on stderr.
func ProbeExit(url string, stderr io.Writer) int {
	if err := Probe(url); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// NATSAuth is how a program authenticates to NATS and verifies the server:
// the flags --nats-creds, --nats-nkey, --nats-user, --nats-password,
// --nats-tls-ca, --nats-tls-cert and --nats-tls-key (docs/config.md, Flags
// and environment).
type NATSAuth struct {
	Creds, NKey, User, Password string
	TLSCA, TLSCert, TLSKey      string
}

// Flags registers a's flags on fs.
func (a *NATSAuth) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.Creds, "nats-creds", "", "NATS credentials file")
	fs.StringVar(&a.NKey, "nats-nkey", "", "NATS nkey seed file")
	fs.StringVar(&a.User, "nats-user", "", "NATS user")
	fs.StringVar(&a.Password, "nats-password", "", "NATS password")
	fs.StringVar(&a.TLSCA, "nats-tls-ca", "", "CA certificate file to verify the NATS server")
	fs.StringVar(&a.TLSCert, "nats-tls-cert", "", "client certificate file")
	fs.StringVar(&a.TLSKey, "nats-tls-key", "", "client key file")
}

// Options are the connection options of a: each one given, in that order.
func (a NATSAuth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	if a.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" || a.TLSKey != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// NATSClient is the NATS connection of a program on the worker side (the
// engine worker, the mock worker, the load generator): NATSAuth's flags and
// --nats-inbox-prefix, the prefix of its reply subjects, which the example
// permissions give each user its own of (docs/security.md, Permissions).
type NATSClient struct {
	NATSAuth
	InboxPrefix string
}

// Flags registers c's flags on fs.
func (c *NATSClient) Flags(fs *flag.FlagSet) {
	c.NATSAuth.Flags(fs)
	fs.StringVar(&c.InboxPrefix, "nats-inbox-prefix", "_INBOX", "prefix of this program's reply subjects; under the example permissions the user's own, e.g. _INBOX_worker_<id> (docs/security.md)")
}

// Options are NATSAuth's options and the inbox prefix.
func (c NATSClient) Options() ([]nats.Option, error) {
	opts, err := c.NATSAuth.Options()
	if err != nil {
		return nil, err
	}
	if c.InboxPrefix != "" && c.InboxPrefix != "_INBOX" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	return opts, nil
}

// Exit ends a program whose run returned err: with status 1 and err on
// stderr after the program's name; nil returns.
func Exit(program string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, program+":", err)
		os.Exit(1)
	}
}

// FreeAddr is a loopback host:port that was free a moment ago: for a
// program to give a server it starts (a child process) a port of its own.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StopContext is a context that ends on SIGINT or SIGTERM, the programs'
// signal to stop (docker stop, Ctrl-C); stop releases it.
func StopContext() (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
