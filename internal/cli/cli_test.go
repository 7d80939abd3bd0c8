package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestConsoleLogsPlainOffTerminal: console logs written to a pipe or file carry
// no colour codes, and durations carry their unit.
func TestConsoleLogsPlainOffTerminal(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger(&b, "info", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("retry_in", 1500*time.Millisecond).Msg("hello")
	if strings.Contains(b.String(), "\x1b[") {
		t.Errorf("console log off a terminal has colour codes: %q", b.String())
	}
	if !strings.Contains(b.String(), "retry_in=1.5s") {
		t.Errorf("duration without its unit: %q", b.String())
	}
	b.Reset()
	log, _ = NewLogger(&b, "info", "json")
	log.Info().Dur("retry_in", 1500*time.Millisecond).Msg("hello")
	if !strings.Contains(b.String(), `"retry_in":"1.5s"`) {
		t.Errorf("json duration without its unit: %q", b.String())
	}
}
