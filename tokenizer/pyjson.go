package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// environment is gonja's default environment with transformers' tojson in
// place of gonja's: apply_chat_template replaces jinja2's filter (which
// escapes <, >, & and ' for HTML) with json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys), and templates
// use it on tool results and arguments, so its bytes are the prompt's.
var environment = func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	if err := filters.Replace("tojson", filterToJSON); err != nil {
		panic(err)
	}
	env := *gonja.DefaultEnvironment
	env.Filters = filters
	return &env
}()

// filterToJSON is transformers' tojson. Mappings come out with their keys
// sorted (their order in the request is not kept by then).
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	d := pyDumper{itemSep: ", ", keySep: ": "}
	if v, ok := params.KwArgs["ensure_ascii"]; ok {
		d.ascii = v.Bool()
	}
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		if !v.IsInteger() {
			return exec.AsValue(fmt.Errorf("tojson: indent %s: want an integer", v.String()))
		}
		d.indented, d.indent, d.itemSep = true, strings.Repeat(" ", max(0, v.Integer())), ","
	}
	if v, ok := params.KwArgs["separators"]; ok && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 {
			return exec.AsValue(fmt.Errorf("tojson: separators %s: want a pair of strings", v.String()))
		}
		seps, _ := v.ToGoSimpleType(false).([]any)
		item, ok1 := seps[0].(string)
		key, ok2 := seps[1].(string)
		if !ok1 || !ok2 {
			return exec.AsValue(fmt.Errorf("tojson: separators %s: want a pair of strings", v.String()))
		}
		d.itemSep, d.keySep = item, key
	}
	x := in.ToGoSimpleType(false)
	if err, ok := x.(error); ok {
		return exec.AsValue(err)
	}
	var b strings.Builder
	if err := d.dump(&b, x, 0); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(b.String())
}

// pyDumper writes a value as Python's json.dumps does.
type pyDumper struct {
	ascii           bool   // ensure_ascii
	indented        bool   // indent given: a newline before each item
	indent          string // one level of it
	itemSep, keySep string
}

func (d *pyDumper) newline(b *strings.Builder, level int) {
	if !d.indented {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(d.indent)
	}
}

func (d *pyDumper) dump(b *strings.Builder, x any, level int) error {
	switch v := x.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.Itoa(v))
	case float64:
		b.WriteString(pyFloat(v))
	case string:
		d.str(b, v)
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteString(d.itemSep)
			}
			d.newline(b, level+1)
			if err := d.dump(b, e, level+1); err != nil {
				return err
			}
		}
		d.newline(b, level)
		b.WriteByte(']')
	case map[string]any:
		if len(v) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(d.itemSep)
			}
			d.newline(b, level+1)
			d.str(b, k)
			b.WriteString(d.keySep)
			if err := d.dump(b, v[k], level+1); err != nil {
				return err
			}
		}
		d.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: a %T is not JSON serializable", x)
	}
	return nil
}

// str writes s as a JSON string with Python's escapes: ", \ and the control
// characters (\n \r \t \b \f by name, the others \u00XX), and, with
// ensure_ascii, everything beyond ASCII as \uXXXX (surrogate pairs above
// U+FFFF).
func (d *pyDumper) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20, d.ascii && r >= 0x7f && r <= 0xffff: // Python escapes DEL too
			fmt.Fprintf(b, `\u%04x`, r)
		case d.ascii && r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr of a float as json.dumps writes it.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	// The decimal exponent of the shortest representation, as Python's
	// repr chooses between the two notations by it.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.LastIndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e // 1e+16, 1.5e-05, as Python writes them
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
