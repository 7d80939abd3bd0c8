// Package scenario is what the harnesses of the scenario files share
// (docs/design.md, Scenario files): running every testdata/*.txt of a
// package with github.com/cockroachdb/datadriven, and reading a command's
// arguments strictly, so that a misspelt argument fails the test instead of
// being ignored. It is a test fixture, imported only by tests.
package scenario

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestData is one command of a file, with its arguments, input block and
// expected output.
type TestData = datadriven.TestData

// Handler runs one command and returns its output.
type Handler = func(*testing.T, *TestData) string

// Run runs every dir/*.txt as a subtest named after the file, each with the
// command handler newFile returns for it (a fresh state per file).
// datadriven's -rewrite flag rewrites the files' expectations.
func Run(t *testing.T, dir string, newFile func() Handler) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files in %s (%v)", dir, err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			datadriven.RunTest(t, path, newFile())
		})
	}
}

// Do runs the command of td with its handler in cmds, reading its arguments
// with the switches flags, and fails the test on an unknown command, on an
// argument the handler did not read, and on a first command other than
// first (started: the file has run its first command). It returns the
// handler's output.
func Do(t *testing.T, td *TestData, started bool, first string, cmds map[string]func(*Args) string, flags ...string) string {
	t.Helper()
	a := NewArgs(t, td, flags...)
	if !started && td.Cmd != first {
		a.Fatalf("the first command must be %s", first)
	}
	cmd, ok := cmds[td.Cmd]
	if !ok {
		a.Fatalf("unknown command %q", td.Cmd)
	}
	out := cmd(a)
	a.Done()
	return out
}

// Args reads the arguments of one command: positional ones (a key without a
// value that is not one of Flags) in order, and key=value ones by name.
// Done fails the test on an argument no reader asked for.
type Args struct {
	T     testing.TB
	TD    *TestData
	flags []string
	used  map[int]bool
}

// NewArgs returns the reader of td's arguments; flags are the valueless
// arguments that are switches, not positional arguments.
func NewArgs(t testing.TB, td *TestData, flags ...string) *Args {
	return &Args{T: t, TD: td, flags: flags, used: map[int]bool{}}
}

// Fatalf fails the test at the command's line of its file.
func (a *Args) Fatalf(format string, args ...any) {
	a.T.Helper()
	a.TD.Fatalf(a.T, format, args...)
}

// Mark records that argument i was read.
func (a *Args) Mark(i int) { a.used[i] = true }

// Keys marks every argument read and returns their keys, in order.
func (a *Args) Keys() []string {
	var keys []string
	for i, arg := range a.TD.CmdArgs {
		a.Mark(i)
		keys = append(keys, arg.Key)
	}
	return keys
}

// Done fails the test if an argument was not read.
func (a *Args) Done() {
	a.T.Helper()
	for i, arg := range a.TD.CmdArgs {
		if !a.used[i] {
			a.Fatalf("unknown argument %q of %s", arg.Key, a.TD.Cmd)
		}
	}
}

// Pos returns the i-th positional argument, failing the test without it.
func (a *Args) Pos(i int) string {
	a.T.Helper()
	n := 0
	for j, arg := range a.TD.CmdArgs {
		if len(arg.Vals) == 0 && !slices.Contains(a.flags, arg.Key) {
			if n == i {
				a.Mark(j)
				return arg.Key
			}
			n++
		}
	}
	a.Fatalf("%s needs %d positional arguments", a.TD.Cmd, i+1)
	return ""
}

// Flag reports whether the switch name is given.
func (a *Args) Flag(name string) bool {
	for j, arg := range a.TD.CmdArgs {
		if arg.Key == name && len(arg.Vals) == 0 {
			a.Mark(j)
			return true
		}
	}
	return false
}

// List returns the values of name=(a, b, ...) or name=a, nil when absent.
func (a *Args) List(name string) []string {
	for j, arg := range a.TD.CmdArgs {
		if arg.Key == name && len(arg.Vals) > 0 {
			a.Mark(j)
			return arg.Vals
		}
	}
	return nil
}

// Str returns the single value of name=value.
func (a *Args) Str(name string) (string, bool) {
	a.T.Helper()
	v := a.List(name)
	if v == nil {
		return "", false
	}
	if len(v) != 1 {
		a.Fatalf("%s takes one value", name)
	}
	return v[0], true
}

// StrOr returns the value of name, or def when absent.
func (a *Args) StrOr(name, def string) string {
	if v, ok := a.Str(name); ok {
		return v
	}
	return def
}

// Uint returns the unsigned integer value of name, or def when absent.
func (a *Args) Uint(name string, def uint64) uint64 {
	a.T.Helper()
	if v, ok := a.Str(name); ok {
		return a.ParseUint(v)
	}
	return def
}

// Float returns the number value of name, or def when absent.
func (a *Args) Float(name string, def float64) float64 {
	a.T.Helper()
	if v, ok := a.Str(name); ok {
		return a.ParseFloat(v)
	}
	return def
}

// Dur returns the duration value of name (1s, 500ms, +30ms), or def.
func (a *Args) Dur(name string, def time.Duration) time.Duration {
	a.T.Helper()
	if v, ok := a.Str(name); ok {
		return a.ParseDur(v)
	}
	return def
}

// Duration returns the positional duration of a clock command (tick +30ms),
// millis=N as in CockroachDB's advance-time, or 0 when neither is given.
func (a *Args) Duration() time.Duration {
	a.T.Helper()
	if _, ok := a.Str("millis"); ok {
		return time.Duration(a.Uint("millis", 0)) * time.Millisecond
	}
	if len(a.TD.CmdArgs) == 0 {
		return 0
	}
	return a.ParseDur(a.Pos(0))
}

// ParseUint parses an unsigned integer, failing the test on a bad one.
func (a *Args) ParseUint(s string) uint64 {
	a.T.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		a.Fatalf("%v", err)
	}
	return v
}

// ParseFloat parses a number, failing the test on a bad one.
func (a *Args) ParseFloat(s string) float64 {
	a.T.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		a.Fatalf("%v", err)
	}
	return v
}

// ParseDur parses a duration, with an optional leading +.
func (a *Args) ParseDur(s string) time.Duration {
	a.T.Helper()
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		a.Fatalf("%v", err)
	}
	return d
}
