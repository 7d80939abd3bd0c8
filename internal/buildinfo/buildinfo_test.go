package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseReadsTheVCSSettings(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Path:      "fairdispatch/cmd/dispatcher",
		Main:      debug.Module{Path: "fairdispatch", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "-race", Value: "true"},
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-11-30T16:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	i := parse(bi)
	want := Info{Path: "fairdispatch/cmd/dispatcher", Version: "v1.2.3", Revision: "0123456789abcdef",
		Time: "2026-11-30T16:00:00Z", Modified: true, GoVersion: "go1.26.0"}
	if i != want {
		t.Fatalf("got %+v, want %+v", i, want)
	}
	if got, w := i.String(), "version v1.2.3 revision 0123456789abcdef+modified time 2026-11-30T16:00:00Z go1.26.0"; got != w {
		t.Fatalf("String: got %q, want %q", got, w)
	}
	if v, r, g := i.Label(); v != "v1.2.3" || r != "0123456789abcdef+modified" || g != "go1.26.0" {
		t.Fatalf("Label: got %q %q %q", v, r, g)
	}
}

func TestMissingFactsAreUnknown(t *testing.T) {
	i := parse(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
	s := i.String()
	if !strings.Contains(s, "revision unknown time unknown") || !strings.HasPrefix(s, "version (devel) ") || i.GoVersion == "" {
		t.Fatalf("got %q (%+v)", s, i)
	}
	if v, r, _ := (Info{}).Label(); v != "unknown" || r != "unknown" {
		t.Fatalf("Label of nothing: got %q %q", v, r)
	}
}
