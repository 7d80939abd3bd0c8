package architecture

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// root is the module's root, relative to this package.
const root = "../.."

// page reads docs/architecture.md: the side of each package, and the sides
// each side may import.
func page(t *testing.T) (sides map[string]string, may map[string][]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sides, may = map[string]string{}, map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 4 || !strings.HasPrefix(sc.Text(), "| ") {
			continue
		}
		first, second := strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])
		switch {
		case strings.HasPrefix(first, "`"): // | `pkg` | side | what |
			sides[strings.Trim(first, "`")] = second
		case first != "side" && !strings.HasPrefix(first, "---"): // | side | sides, ... |
			var list []string
			for _, s := range strings.Split(second, ",") {
				list = append(list, strings.TrimSpace(s))
			}
			may[first] = list
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(sides) == 0 || len(may) == 0 {
		t.Fatal("docs/architecture.md: found no package table or no import rules")
	}
	return sides, may
}

// modulePath reads the module path from go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "module "); ok {
			return strings.TrimSpace(p)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// imports maps each package directory of the module (slash-separated,
// relative to the root) to the module packages its files import, for the
// non-test files and the test files apart.
func imports(t *testing.T, mod string) (code, tests map[string]map[string]bool) {
	t.Helper()
	code, tests = map[string]map[string]bool{}, map[string]map[string]bool{}
	fset := token.NewFileSet()
	walkGo(t, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		dir := filepath.ToSlash(rel)
		set := code
		if strings.HasSuffix(path, "_test.go") {
			set = tests
		}
		if set[dir] == nil {
			set[dir] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == mod || strings.HasPrefix(p, mod+"/") {
				set[dir][strings.TrimPrefix(strings.TrimPrefix(p, mod), "/")] = true
			}
		}
		return nil
	})
	return code, tests
}

// walkGo calls visit with the path of each Go file of the module, passing
// over testdata, node_modules and hidden directories; an error fails the test.
func walkGo(t *testing.T, visit func(path string) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		return visit(path)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestImportsFollowTheSides: every package is on the page, and imports only
// what its side may (docs/architecture.md, What each side may import).
func TestImportsFollowTheSides(t *testing.T) {
	sides, may := page(t)
	code, tests := imports(t, modulePath(t))
	for dir := range code {
		if _, ok := sides[dir]; !ok {
			t.Errorf("package %s is not in docs/architecture.md's table", dir)
		}
	}
	for pkg, side := range sides {
		if _, ok := may[side]; !ok {
			t.Errorf("docs/architecture.md: package %s has side %q, which has no import rule", pkg, side)
		}
		if _, ok := code[pkg]; !ok && tests[pkg] == nil {
			t.Errorf("docs/architecture.md lists %s, which has no Go files", pkg)
		}
	}
	check := func(dir string, set map[string]bool, what string) {
		side := sides[dir]
		allowed := may[side]
		if what == "tests" {
			allowed = append(slices.Clip(allowed), "test") // the shared fixtures, internal/natstest and internal/scenario
		}
		if slices.Contains(allowed, "anything") {
			return
		}
		var bad []string
		for p := range set {
			if p == dir {
				continue // an external test package imports its own package
			}
			if !slices.Contains(allowed, sides[p]) {
				bad = append(bad, p+" ("+sides[p]+")")
			}
		}
		sort.Strings(bad)
		for _, p := range bad {
			t.Errorf("%s %s (%s) imports %s: a %s package may import only %s (docs/architecture.md)",
				dir, what, side, p, side, strings.Join(allowed, ", "))
		}
	}
	for dir, set := range code {
		check(dir, set, "code")
	}
	for dir, set := range tests {
		check(dir, set, "tests")
	}
}

// TestWorkerSideNeverImportsTheDispatcher is the rule that matters most,
// spelt out: the programs that talk to the dispatcher share only the
// protocol with it. It fails if the page's rules are loosened by mistake.
func TestWorkerSideNeverImportsTheDispatcher(t *testing.T) {
	sides, _ := page(t)
	code, tests := imports(t, modulePath(t))
	for dir, side := range sides {
		if side != "worker" {
			continue
		}
		for _, set := range []map[string]bool{code[dir], tests[dir]} {
			for p := range set {
				switch sides[p] {
				case "core", "adapter", "actor", "program":
					t.Errorf("worker-side package %s imports %s, a %s package of the dispatcher", dir, p, sides[p])
				}
			}
		}
	}
}

// TestHeaderNamesDefinedOnce: every Dispatch-* header name is spelt in one
// place, package wire; every other non-test file uses wire's constants. A
// string literal that is exactly a header name anywhere else
// fails; help texts and log messages that mention one are not names.
func TestHeaderNamesDefinedOnce(t *testing.T) {
	name := regexp.MustCompile(`^Dispatch-[A-Za-z0-9-]+$`)
	fset := token.NewFileSet()
	defined := 0
	walkGo(t, func(path string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		inWire := filepath.ToSlash(filepath.Dir(path)) == root+"/wire"
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !name.MatchString(s) {
				return true
			}
			if inWire {
				defined++
			} else {
				t.Errorf("%s: %q spelt out; use wire's constant", fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if defined < 20 {
		t.Fatalf("found %d header names in package wire; is the walk right?", defined)
	}
}
