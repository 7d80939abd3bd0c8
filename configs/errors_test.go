package configs

import "testing"

func TestValidationErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probs []Problem
		want  string
	}{
		{"path and line", []Problem{{Path: "policy_classes[1].quantum", Line: 12, Msg: "must be > 0"}},
			"policy.yaml:12: policy_classes[1].quantum: must be > 0"},
		{"no path", []Problem{{Line: 3, Msg: "a second YAML document"}}, "policy.yaml:3: a second YAML document"},
		{"no line", []Problem{{Msg: "empty document"}}, "policy.yaml: empty document"},
		{"no line, path", []Problem{{Path: "x", Msg: "m"}}, "policy.yaml: x: m"},
		{"several", []Problem{{Path: "a", Line: 1, Msg: "m1"}, {Path: "b", Line: 2, Msg: "m2"}},
			"policy.yaml:1: a: m1\npolicy.yaml:2: b: m2"},
	} {
		e := &ValidationError{Name: "policy.yaml", Problems: tc.probs}
		if got := e.Error(); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProblemString(t *testing.T) {
	if got, want := (Problem{Path: "p", Line: 4, Msg: "m"}).String(), "4: p: m"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := (Problem{Msg: "m"}).String(), "m"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
