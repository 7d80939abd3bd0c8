// Command fairctl is the operator's tool for a fairdispatch deployment: one
// binary with subcommands, following the conventions of the nats CLI
// (--server, credentials, --json on every read).
//
//	fairctl [global flags] <command> [subcommand] [flags] [args]
//
// Global flags come before the command; each subcommand parses its own flags.
// Every subcommand lives in a file of its own and registers itself in
// commands from an init function, so commands can be added without touching
// this file. The exit status is 0 on success, 1 on a failure, 2 on a usage
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
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
}

// connect connects to NATS with the global flags.
func (g *globals) connect(ctx context.Context) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return bus.Connect(ctx, bus.Options{
		URL: g.server, Name: "fairctl", CredsFile: g.creds, NKeyFile: g.nkey, User: g.user, Password: g.password,
		TLSCA: g.tlsCA, TLSCert: g.tlsCert, TLSKey: g.tlsKey, InboxPrefix: g.inboxPrefix,
	}, zerolog.Nop())
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
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return def
	}
	fs.StringVar(&g.server, "server", env("NATS_URL", nats.DefaultURL), "NATS server URLs, comma-separated (env NATS_URL)")
	fs.StringVar(&g.creds, "creds", env("NATS_CREDS", ""), "user credentials file (env NATS_CREDS)")
	fs.StringVar(&g.nkey, "nkey", env("NATS_NKEY", ""), "nkey seed file (env NATS_NKEY)")
	fs.StringVar(&g.user, "user", env("NATS_USER", ""), "user name (env NATS_USER)")
	fs.StringVar(&g.password, "password", env("NATS_PASSWORD", ""), "password (env NATS_PASSWORD)")
	fs.StringVar(&g.tlsCA, "tlsca", env("NATS_CA", ""), "CA file that verifies the server (env NATS_CA)")
	fs.StringVar(&g.tlsCert, "tlscert", env("NATS_CERT", ""), "client certificate file (env NATS_CERT)")
	fs.StringVar(&g.tlsKey, "tlskey", env("NATS_KEY", ""), "client key file (env NATS_KEY)")
	fs.StringVar(&g.inboxPrefix, "inbox-prefix", env("NATS_INBOX_PREFIX", ""), "inbox prefix of the connection (env NATS_INBOX_PREFIX)")
	fs.StringVar(&g.prefix, "subject-prefix", env("DISPATCHER_SUBJECT_PREFIX", naming.DefaultPrefix), "the deployment's subject prefix; every stream and bucket name derives from it")
	fs.StringVar(&g.admin, "admin", env("FAIRCTL_ADMIN", "http://127.0.0.1:8080"), "the dispatcher's admin API base URL (env FAIRCTL_ADMIN)")
	fs.StringVar(&g.adminToken, "admin-token", env("DISPATCHER_ADMIN_TOKEN", ""), "bearer token of the admin API's write routes")
	fs.BoolVar(&g.json, "json", false, "print reads as JSON")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Second, "how long to wait for NATS or the admin API")
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	names, err := naming.New(g.prefix)
	if err != nil {
		fmt.Fprintf(stderr, "fairctl: --subject-prefix: %v\n", err)
		return 2
	}
	g.names = names
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
		fmt.Fprintf(stderr, "fairctl %s: %v\n", rest[0], err)
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
