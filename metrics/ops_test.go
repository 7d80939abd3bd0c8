package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSetOldestQueued(t *testing.T) {
	m, reg := newTest(t)
	m.SetOldestQueued(1, 2.5)
	m.SetOldestQueued(5, 9) // outside the classes: ignored
	m.SetOldestQueued(-1, 9)
	if got := value(t, reg, "fairdispatch_oldest_queued_seconds", "class", "regular"); got != 2.5 {
		t.Errorf("regular: got %v, want 2.5", got)
	}
	if got := value(t, reg, "fairdispatch_oldest_queued_seconds", "class", "premium"); got != 0 {
		t.Errorf("premium: got %v, want 0", got)
	}
}

func TestRegisterBuildInfo(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	RegisterBuildInfo(reg, "v1.0.0", "abc123", "go1.26.0")
	if got := value(t, reg, "fairdispatch_build_info", "goversion", "go1.26.0", "revision", "abc123", "version", "v1.0.0"); got != 1 {
		t.Fatalf("build_info: got %v, want 1", got)
	}
}
