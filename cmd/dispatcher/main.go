// Command dispatcher runs fairdispatch: it takes requests from NATS JetStream
// and dispatches them to workers with weighted DRR across policy classes.
//
// Every flag has an environment variable DISPATCHER_<FLAG>; see docs/config.md.
// Without --nats-url it starts an embedded nats-server with JetStream.
package main

import (
	"fmt"
	"io"
	"os"

	"fairdispatch/configs"
	"fairdispatch/internal/buildinfo"
	"fairdispatch/internal/cli"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, os.LookupEnv, stderr)
	if err != nil {
		return cli.ParseExit("dispatcher", err, stderr)
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
		return cli.ProbeExit(s.healthProbe, stderr)
	}
	log, err := s.log.Logger(stderr)
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
	ctx, stop := cli.StopContext()
	defer stop()
	if err := serve(ctx, s, pol, log, stdout); err != nil {
		log.Error().Err(err).Msg("dispatcher stopped")
		return 1
	}
	return 0
}
