package spin

import (
	"testing"
	"time"
)

// TestUntilNeverEarly: Until never returns before its deadline, whether the
// deadline is past, within Window, or beyond it.
func TestUntilNeverEarly(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 0, 200 * time.Microsecond, Window, 3 * time.Millisecond} {
		deadline := time.Now().Add(d)
		Until(deadline)
		if now := time.Now(); now.Before(deadline) {
			t.Fatalf("%v: returned %v before the deadline", d, deadline.Sub(now))
		}
	}
}

// BenchmarkLateness reports how late a 5.12 ms wait ends, with a timer and
// with Until (the figures of the package doc).
func BenchmarkLateness(b *testing.B) {
	const d = 5120 * time.Microsecond
	for _, c := range []struct {
		name string
		wait func(time.Time)
	}{
		{"timer", func(t time.Time) { time.Sleep(time.Until(t)) }},
		{"spin", Until},
	} {
		b.Run(c.name, func(b *testing.B) {
			var late time.Duration
			for b.Loop() {
				deadline := time.Now().Add(d)
				c.wait(deadline)
				late += time.Since(deadline)
			}
			b.ReportMetric(float64(late.Microseconds())/float64(b.N), "us-late/op")
		})
	}
}
