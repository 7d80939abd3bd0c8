package kvindex_test

import (
	"strings"
	"testing"

	"fairdispatch/kvindex"
	"fairdispatch/wire"
)

func TestParseWeights(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [wire.NumTiers]float64
	}{
		{"", kvindex.DefaultWeights},
		{"device=1,host=0.75,disk=0.5,shared=0.5", kvindex.DefaultWeights},
		{" host = 0.9 , shared=0", [wire.NumTiers]float64{1, 0.9, 0.5, 0}},
		{"disk=1e-1", [wire.NumTiers]float64{1, 0.75, 0.1, 0.5}},
	} {
		got, err := kvindex.ParseWeights(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseWeights(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"gpu=1", "unknown tier"},
		{"device", "not tier=weight"},
		{"device=1,device=0.5", "twice"},
		{"host=1.5", "not a number in [0, 1]"},
		{"host=-0.1", "not a number in [0, 1]"},
		{"host=NaN", "not a number in [0, 1]"},
		{"host=x", "not a number in [0, 1]"},
		{"device=1,", "not tier=weight"},
	} {
		if _, err := kvindex.ParseWeights(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseWeights(%q): got %v, want an error containing %q", c.in, err, c.want)
		}
	}
	_, err := kvindex.ParseWeights("gpu=1,host=2")
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems: got %v, want both reported", err)
	}
}
