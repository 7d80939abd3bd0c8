package configs

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"fairdispatch/wire"
)

// walker collects problems while reading a yaml.Node tree. Every helper
// reports what is wrong with its node and returns ok=false, so reading goes
// on and every problem of the file is reported at once.
type walker struct {
	probs []Problem
}

func (w *walker) add(line int, path, format string, args ...any) {
	w.probs = append(w.probs, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// sorted returns the problems in line order (stable: equal lines keep the
// order they were found in).
func (w *walker) sorted() []Problem {
	sort.SliceStable(w.probs, func(i, j int) bool { return w.probs[i].Line < w.probs[j].Line })
	return w.probs
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntax reports a decoder error, lifting the line out of its text.
func (w *walker) syntax(err error) {
	msg := err.Error()
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		w.add(line, "", "YAML syntax: %s", m[2])
		return
	}
	w.add(0, "", "YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a node holds, for "got ..." messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return fmt.Sprintf("a string (%q)", n.Value)
	case "!!int":
		return "an integer (" + n.Value + ")"
	case "!!float":
		return "a float (" + n.Value + ")"
	case "!!bool":
		return "a boolean (" + n.Value + ")"
	}
	return fmt.Sprintf("%s (%s)", n.ShortTag(), n.Value)
}

// field is one key of a mapping: the key node (for its line) and the value.
type field struct {
	key, val *yaml.Node
}

// mapping reads a mapping with the given known keys, reporting every unknown
// or repeated key and every key that is not a string. The result holds the
// first occurrence of each known key present.
func (w *walker) mapping(n *yaml.Node, path string, known ...string) (map[string]field, bool) {
	n, ok := w.mappingNode(n, path, "")
	if !ok {
		return nil, false
	}
	out := make(map[string]field, len(known))
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kd := deref(k)
		// A merge key (<<) reads as a key, and is then an unknown field.
		if kd.Kind != yaml.ScalarNode || kd.ShortTag() != "!!str" && kd.ShortTag() != "!!merge" {
			w.add(k.Line, path, "keys must be strings, got %s", describe(kd))
			continue
		}
		p := join(path, kd.Value)
		if repeated(w, seen, kd.Value, k.Line, p, "key") {
			continue
		}
		if !contains(known, kd.Value) {
			w.add(k.Line, p, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		out[kd.Value] = field{key: k, val: v}
	}
	return out, true
}

// repeated reports whether key k of a mapping, at line, was seen before in
// it (seen maps each key seen to its line): a repeat is a problem at p,
// "duplicate <noun>". A key seen for the first time is recorded.
func repeated[K comparable](w *walker, seen map[K]int, k K, line int, p, noun string) bool {
	if first, dup := seen[k]; dup {
		w.add(line, p, "duplicate %s (first at line %d)", noun, first)
		return true
	}
	seen[k] = line
	return false
}

// mappingNode follows n's aliases to a mapping, or reports, at n's own line,
// that it must be a mapping (of says of what, "" for any).
func (w *walker) mappingNode(n *yaml.Node, path, of string) (*yaml.Node, bool) {
	d := deref(n)
	if d.Kind != yaml.MappingNode {
		if of != "" {
			of = " " + of
		}
		w.add(n.Line, path, "must be a mapping%s, got %s", of, describe(d))
		return nil, false
	}
	return d, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// list reads a sequence.
func (w *walker) list(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	line := n.Line
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		w.add(line, path, "must be a list, got %s", describe(n))
		return nil, false
	}
	return n.Content, true
}

// items reads the list that key (the key node, for its line) names at path,
// which must not be empty.
func (w *walker) items(key, n *yaml.Node, path string) ([]*yaml.Node, bool) {
	items, ok := w.list(n, path)
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		w.add(key.Line, path, "must not be empty")
		return nil, false
	}
	return items, true
}

// scalar follows n's aliases to a scalar node with one of tags, or reports,
// at n's own line, that it must be what.
func (w *walker) scalar(n *yaml.Node, path, what string, tags ...string) (*yaml.Node, bool) {
	d := deref(n)
	if d.Kind != yaml.ScalarNode || !contains(tags, d.ShortTag()) {
		w.add(n.Line, path, "must be %s, got %s", what, describe(d))
		return nil, false
	}
	return d, true
}

// decode reads scalar n (as scalar does) into dst, or reports why it cannot
// be what; it returns the scalar node.
func (w *walker) decode(n *yaml.Node, path, what string, dst any, tags ...string) (*yaml.Node, bool) {
	d, ok := w.scalar(n, path, what, tags...)
	if !ok {
		return nil, false
	}
	if err := d.Decode(dst); err != nil {
		w.add(n.Line, path, "must be %s: %v", what, err)
		return nil, false
	}
	return d, true
}

// str reads a string scalar. Numbers, booleans and null are not strings:
// quote them.
func (w *walker) str(n *yaml.Node, path string) (string, bool) {
	d, ok := w.scalar(n, path, "a string", "!!str")
	if !ok {
		return "", false
	}
	return d.Value, true
}

// maxToken is the longest subject token, in bytes.
const maxToken = wire.MaxTokenLen

// token reads a string that must be a subject token.
func (w *walker) token(n *yaml.Node, path string) (string, bool) {
	s, ok := w.str(n, path)
	if !ok {
		return "", false
	}
	if !wire.ValidToken(s) {
		w.add(n.Line, path, "%q is not a subject token ([A-Za-z0-9_-]+, at most %d bytes)", s, maxToken)
		return "", false
	}
	return s, true
}

// uint reads a non-negative integer of at most MaxTokens.
func (w *walker) uint(n *yaml.Node, path string) (uint64, bool) {
	line := n.Line
	var v any
	n, ok := w.decode(n, path, "a non-negative integer", &v, "!!int")
	if !ok {
		return 0, false
	}
	var u uint64
	switch x := v.(type) {
	case int:
		if x < 0 {
			w.add(line, path, "must be a non-negative integer, got %d", x)
			return 0, false
		}
		u = uint64(x)
	case uint64:
		u = x
	default:
		w.add(line, path, "must be a non-negative integer, got %s", describe(n))
		return 0, false
	}
	if u > MaxTokens {
		w.add(line, path, "must be at most 2^40 (%d), got %d", uint64(MaxTokens), u)
		return 0, false
	}
	return u, true
}

// float reads a finite number (an integer is accepted).
func (w *walker) float(n *yaml.Node, path string) (float64, bool) {
	var f float64
	d, ok := w.decode(n, path, "a number", &f, "!!int", "!!float")
	if !ok {
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		w.add(n.Line, path, "must be finite, got %s", d.Value)
		return 0, false
	}
	return f, true
}
