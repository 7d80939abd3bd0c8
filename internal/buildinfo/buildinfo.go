// Package buildinfo reads what the Go toolchain recorded in a binary about its
// build (runtime/debug.ReadBuildInfo): the module version and the version
// control facts, for --version and the fairdispatch_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what a binary knows about its build. A field the toolchain did not
// record is empty ("go run", "go test", a build outside a repository).
type Info struct {
	// Path is the main package's import path, e.g. fairdispatch/cmd/dispatcher.
	Path string
	// Version is the main module's version: a tag, a pseudo-version, or
	// "(devel)" for a build from a work tree.
	Version string
	// Revision is the VCS commit (vcs.revision), Time its time in RFC 3339
	// (vcs.time), and Modified whether the work tree had uncommitted changes
	// (vcs.modified).
	Revision string
	Time     string
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the running binary's Info. Without build information (a binary
// built without module support) only GoVersion is set.
func Read() Info {
	i := Info{GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	return parse(bi)
}

func parse(bi *debug.BuildInfo) Info {
	i := Info{Path: bi.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.GoVersion == "" {
		i.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the one line --version prints: the program, version, revision
// (with "+modified" for a dirty tree), commit time and Go version, with
// "unknown" for what was not recorded.
func (i Info) String() string {
	rev := orUnknown(i.Revision)
	if i.Modified {
		rev += "+modified"
	}
	return fmt.Sprintf("version %s revision %s time %s %s", orUnknown(i.Version), rev, orUnknown(i.Time), i.GoVersion)
}

// Label returns the values of the fairdispatch_build_info labels version,
// revision (with "+modified" for a dirty tree) and goversion, "unknown" for
// what was not recorded.
func (i Info) Label() (version, revision, goversion string) {
	rev := orUnknown(i.Revision)
	if i.Modified {
		rev += "+modified"
	}
	return orUnknown(i.Version), rev, i.GoVersion
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
