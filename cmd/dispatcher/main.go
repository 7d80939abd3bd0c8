// Command dispatcher runs fairdispatch: it takes requests from NATS JetStream
// and dispatches them to workers with weighted DRR across policy classes.
//
// Every flag has an environment variable DISPATCHER_<FLAG>; see docs/config.md.
// Without --nats-url it starts an embedded nats-server with JetStream.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"fairdispatch/configs"
	"fairdispatch/internal/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var pe parseError
		if !errors.As(err, &pe) { // the flag package has printed parse errors already
			fmt.Fprintln(stderr, "dispatcher:", err)
		}
		return 2
	}
	if s.version {
		fmt.Fprintln(stdout, "dispatcher", buildinfo.Read())
		return 0
	}
	if s.checkConfig != "" {
		pol, err := configs.Load(s.checkConfig)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprint(stdout, pol.Matrix())
		return 0
	}
	if s.healthProbe != "" {
		return probe(s.healthProbe, stderr)
	}
	log, err := newLogger(s, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "dispatcher:", err)
		return 2
	}
	// A bad policy is reported as --check-config reports it: one problem a
	// line, file:line: path, on stderr.
	pol, err := loadPolicy(s)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, s, pol, log, stdout); err != nil {
		log.Error().Err(err).Msg("dispatcher stopped")
		return 1
	}
	return 0
}

func newLogger(s *settings, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(s.logLevel)
	if err != nil || s.logLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", s.logLevel)
	}
	// Durations are logged as Go duration strings with their unit ("1.5s"),
	// in both formats (docs/decisions.md, Operations: logs).
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	out := w
	if s.logFormat == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// isTerminal reports whether w is a terminal: colour codes only go there.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
