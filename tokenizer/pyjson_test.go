package tokenizer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// renderWith renders src as the chat template is rendered, with vars.
func renderWith(t *testing.T, src string, vars map[string]any) string {
	t.Helper()
	c := config.New()
	c.TrimBlocks, c.LeftStripBlocks = true, true
	loader, err := loaders.NewFileSystemLoader("")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := loaders.NewShiftedLoader("t", strings.NewReader(src), loader)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := exec.NewTemplate("t", c, sl, environment)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, exec.NewContext(vars)); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return b.String()
}

// TestToJSONIsTransformers: tojson writes what transformers' tojson
// (json.dumps with ensure_ascii=False) writes, not jinja2's HTML-safe one.
// The expected strings are jinja2 3.1.6's, with transformers' filter:
// def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
// return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
func TestToJSONIsTransformers(t *testing.T) {
	vars := map[string]any{
		"s": "<result a=\"1\"> & 'b'\u2028",
		"d": map[string]any{"a": "x<y & 'z' é\n\t\x01", "b": []any{1, 2.5, nil, true, 1e20, 0.0001, 3.0}},
		"n": map[string]any{"a": []any{1, map[string]any{"c": []any{}}}, "b": map[string]any{}},
		"e": "é😀",
	}
	for _, c := range []struct{ src, want string }{
		{`{{ s | tojson }}`, "\"<result a=\\\"1\\\"> & 'b'\u2028\""},
		{`{{ d | tojson }}`, "{\"a\": \"x<y & 'z' \u00e9\\n\\t\\u0001\", \"b\": [1, 2.5, null, true, 1e+20, 0.0001, 3.0]}"},
		{`{{ n | tojson(indent=2) }}`, "{\n  \"a\": [\n    1,\n    {\n      \"c\": []\n    }\n  ],\n  \"b\": {}\n}"},
		{`{{ n | tojson(separators=(",", ":")) }}`, "{\"a\":[1,{\"c\":[]}],\"b\":{}}"},
		{`{{ e | tojson(ensure_ascii=true) }}`, "\"\\u00e9\\ud83d\\ude00\""},
		{`{{ n | tojson(indent=0) }}`, "{\n\"a\": [\n1,\n{\n\"c\": []\n}\n],\n\"b\": {}\n}"},
	} {
		if got := renderWith(t, c.src, vars); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.src, got, c.want)
		}
	}
}

// TestPyFloat: floats as Python's repr writes them, the notation chosen by
// the shortest representation's exponent (a value just below 1e-4 too).
func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0.00009999999999999998, "9.999999999999998e-05"}, {1e-4, "0.0001"}, {1e16, "1e+16"},
		{9999999999999998.0, "9999999999999998.0"}, {123, "123.0"}, {1.5e-5, "1.5e-05"}, {0.1, "0.1"},
	} {
		if got := pyFloat(c.f); got != c.want {
			t.Errorf("pyFloat(%v) = %s, want %s (Python's repr)", c.f, got, c.want)
		}
	}
	var b strings.Builder
	(&pyDumper{ascii: true}).str(&b, "a\x7fb")
	if got := b.String(); got != `"a\u007fb"` {
		t.Errorf("DEL with ensure_ascii: %s, want %s", got, `"a\u007fb"`)
	}
}
