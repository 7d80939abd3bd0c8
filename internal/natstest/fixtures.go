package natstest

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer that goroutines may write while the test reads
// it: the sink of a logger or of a subprocess's output.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Missing ends a test that cannot run for want of msg (a program, a
// package): it fails under CI=true, where every test must run, and is
// skipped otherwise, saying so.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Program returns the program named by the environment variable env, or else
// the first of names found on PATH (or, for a name with a slash, where it
// says). Without one it ends the test with Missing, naming env and then
// advice, such as "install one (apt-get install chromium) to run the status
// page tests".
func Program(t testing.TB, env, advice string, names ...string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	for _, name := range names {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	Missing(t, "no "+names[0]+" on PATH and "+env+" unset: "+advice)
	return ""
}
