package configs

import (
	"strconv"
	"strings"
)

// Problem is one validation problem of a policy file.
type Problem struct {
	Path string // YAML path, e.g. "policy_classes[1].quantum"; "" for the whole document
	Line int    // 1-based line in the file; 0 when unknown
	Msg  string // what is wrong
}

// String renders the problem as "line: path: msg", leaving out what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError reports every problem found in a policy file. Parse and
// Load return it (as *ValidationError) for every fault of the document
// itself, syntax errors included.
type ValidationError struct {
	Name     string    // the file name given to Parse
	Problems []Problem // in line order; never empty
}

// Error joins the problems one per line, each as
// "name:line: path: msg", e.g. "policy.yaml:12: policy_classes[1].quantum: must be > 0".
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Name)
		if p.Line > 0 {
			b.WriteByte(':')
		} else {
			b.WriteString(": ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}
