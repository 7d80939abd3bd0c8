// Command fairctl is the operator's tool for a fairdispatch deployment: one
// binary with subcommands, following the conventions of the nats CLI
// (--server, credentials, --json on every read).
//
//	fairctl [global flags] <command> [subcommand] [flags] [args]
//
// Global flags come before the command or among a subcommand's own flags.
// Every subcommand lives in a file of its own and registers itself in
// commands from an init function, so commands can be added without touching
// this file. The exit status is 0 on success, 1 on a failure, 2 on a usage
// error.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"fairdispatch/internal/cli"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"fairdispatch/bus"
	"fairdispatch/naming"
)

// command is one top-level command of fairctl.
type command struct {
	// summary is the one-line description shown by fairctl --help.
	summary string
	// run runs the command with the arguments after its name.
	run func(ctx context.Context, g *globals, args []string) error
}

// commands holds every command by name; each command's file adds itself.
var commands = map[string]command{}

// errUsage marks an error in the command line: the exit status is 2.
var errUsage = errors.New("usage")

// usageError returns an error wrapping errUsage with a message.
func usageError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// globals are the flags shared by every command.
type globals struct {
	server, creds, nkey, user, password string
	tlsCA, tlsCert, tlsKey              string
	inboxPrefix                         string
	prefix                              string
	admin, adminToken                   string
	json                                bool
	timeout                             time.Duration

	names  naming.Names
	stdout io.Writer
	stderr io.Writer

	// refused is the first permissions violation the server reported on
	// the connection: what a command that then timed out waited for.
	refused atomic.Pointer[error]
}

// connect connects to NATS with the global flags.
func (g *globals) connect(ctx context.Context) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return bus.Connect(ctx, bus.Options{
		URL: g.server, Name: "fairctl", CredsFile: g.creds, NKeyFile: g.nkey, User: g.user, Password: g.password,
		TLSCA: g.tlsCA, TLSCert: g.tlsCert, TLSKey: g.tlsKey, InboxPrefix: g.inboxPrefix,
		OnAsyncError: func(err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				g.refused.CompareAndSwap(nil, &err)
			}
		},
	}, zerolog.Nop())
}

// refusal says what the server refused on the connection, if anything, for a
// command that failed (most often by waiting for an answer that could not
// come): with a hint when it is the subscription to fairctl's own inbox,
// which under per-user inbox permissions (docs/security.md) needs
// --inbox-prefix.
func (g *globals) refusal() string {
	p := g.refused.Load()
	if p == nil {
		return ""
	}
	s := fmt.Sprintf(" (the server refused: %v", *p)
	inbox := cmp.Or(g.inboxPrefix, nats.InboxPrefix[:len(nats.InboxPrefix)-1])
	if strings.Contains(strings.ToLower((*p).Error()), strings.ToLower("subscription to \""+inbox+".")) {
		s += "; a user that may read only its own inbox needs --inbox-prefix, e.g. _INBOX_<user>, as docs/security.md says"
	}
	return s + ")"
}

// jetstream connects (connect) and returns the connection with its JetStream
// client; the caller closes the connection.
func (g *globals) jetstream(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := g.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// register adds the global flags to fs, bound to g. The command's flag set
// has them with the values the environment gives (fromEnv); a subcommand's
// (flagSet) with the values parsed before it, so that a global flag may come
// before the command or after the subcommand, as with the nats CLI.
func (g *globals) register(fs *flag.FlagSet, fromEnv bool) {
	// value is the flag's starting value and usage: the environment's
	// (or def) for the command, the value parsed so far for a subcommand.
	value := func(p *string, envName, def, usage string) (string, string) {
		if !fromEnv {
			return *p, usage
		}
		if v, ok := os.LookupEnv(envName); ok {
			def = v
		}
		return def, usage + " (env " + envName + ")"
	}
	str := func(p *string, name, envName, def, usage string) {
		def, usage = value(p, envName, def, usage)
		fs.StringVar(p, name, def, usage)
	}
	sec := func(p *string, name, envName, usage string) {
		*p, usage = value(p, envName, "", usage)
		fs.Var(secret{p}, name, usage) // --help shows no default
	}
	str(&g.server, "server", "NATS_URL", nats.DefaultURL, "NATS server URLs, comma-separated")
	str(&g.creds, "creds", "NATS_CREDS", "", "user credentials file")
	str(&g.nkey, "nkey", "NATS_NKEY", "", "nkey seed file")
	str(&g.user, "user", "NATS_USER", "", "user name")
	sec(&g.password, "password", "NATS_PASSWORD", "password")
	str(&g.tlsCA, "tlsca", "NATS_CA", "", "CA file that verifies the server")
	str(&g.tlsCert, "tlscert", "NATS_CERT", "", "client certificate file")
	str(&g.tlsKey, "tlskey", "NATS_KEY", "", "client key file")
	str(&g.inboxPrefix, "inbox-prefix", "NATS_INBOX_PREFIX", "", "inbox prefix of the connection")
	str(&g.prefix, "subject-prefix", "DISPATCHER_SUBJECT_PREFIX", naming.DefaultPrefix, "the deployment's subject prefix; every stream and bucket name derives from it")
	str(&g.admin, "admin", "FAIRCTL_ADMIN", "http://127.0.0.1:8080", "the dispatcher's admin API base URL")
	sec(&g.adminToken, "admin-token", "DISPATCHER_ADMIN_TOKEN", "bearer token of the admin API's write routes")
	asJSON, timeout := false, 5*time.Second
	if !fromEnv {
		asJSON, timeout = g.json, g.timeout
	}
	fs.BoolVar(&g.json, "json", asJSON, "print reads as JSON")
	fs.DurationVar(&g.timeout, "timeout", timeout, "how long to wait for NATS or the admin API")
}

// secret is a string flag whose value --help never prints: a password or a
// token from the environment or an earlier flag is not a default to show.
type secret struct{ p *string }

func (s secret) String() string { return "" }

func (s secret) Set(v string) error {
	*s.p = v
	return nil
}

// resolve derives what the global flags imply (the names of the prefix).
func (g *globals) resolve() error {
	names, err := naming.New(g.prefix)
	if err != nil {
		return fmt.Errorf("--subject-prefix: %w", err)
	}
	g.names = names
	return nil
}

// flagSet returns the flag set of subcommand name, with the global flags.
func (g *globals) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	g.register(fs, false)
	return fs
}

// subcommandFirst moves global flags given between a command and its
// subcommand (fairctl dlq --json ls) after the subcommand, whose flag set
// parses them: a global flag may come anywhere after the command. An
// unknown flag there is left in place, for the subcommand's check to name.
func (g *globals) subcommandFirst(args []string) []string {
	fs := g.flagSet("")
	i := 0
	for i < len(args) && len(args[i]) > 1 && args[i][0] == '-' && args[i] != "--" {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			break
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || ok && b.IsBoolFlag() {
			i++
		} else {
			i += 2 // the flag and its value
		}
	}
	if i == 0 || i >= len(args) {
		return args
	}
	return append(append([]string{args[i]}, args[:i]...), args[i+1:]...)
}

// parse parses a subcommand's args with fs (from flagSet), flags and
// arguments in any order (dlq show 7 --json); after "--" everything is an
// argument. fs.Args() are the arguments then. A bad flag is a usage error.
func (g *globals) parse(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError("%v", err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); len(rest) == 0 || n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	_ = fs.Parse(append([]string{"--"}, pos...)) // only sets fs.Args()
	if err := g.resolve(); err != nil {
		return usageError("%v", err)
	}
	return nil
}

func main() {
	ctx, stop := cli.StopContext()
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs fairctl with args (without the program name) and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("fairctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs, true)
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := g.resolve(); err != nil {
		fmt.Fprintf(stderr, "fairctl: %v\n", err)
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(fs, stderr)
		return 2
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "fairctl: unknown command %q (fairctl --help lists them)\n", rest[0])
		return 2
	}
	if err := cmd.run(ctx, g, rest[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "fairctl %s: %v%s\n", rest[0], err, g.refusal())
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "usage: fairctl [global flags] <command> [subcommand] [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	fs.PrintDefaults()
}
