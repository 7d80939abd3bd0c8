package main

import (
	"context"
	"fmt"

	"fairdispatch/internal/buildinfo"
)

func init() {
	commands["version"] = command{
		summary: "print fairctl's version, VCS revision and time, and Go version",
		run: func(_ context.Context, g *globals, args []string) error {
			if len(args) > 0 {
				return usageError("version takes no arguments")
			}
			_, err := fmt.Fprintln(g.stdout, "fairctl", buildinfo.Read())
			return err
		},
	}
}
