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
			fs := g.flagSet("version")
			if err := g.parse(fs, args); err != nil {
				return err
			}
			if fs.NArg() > 0 {
				return usageError("version takes no arguments")
			}
			if g.json {
				i := buildinfo.Read()
				return writeJSON(g.stdout, struct {
					Version   string `json:"version"`
					Revision  string `json:"revision"`
					Time      string `json:"time"`
					Modified  bool   `json:"modified"`
					GoVersion string `json:"go_version"`
				}{i.Version, i.Revision, i.Time, i.Modified, i.GoVersion})
			}
			_, err := fmt.Fprintln(g.stdout, "fairctl", buildinfo.Read())
			return err
		},
	}
}
