//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFileName is the lock file the embedded server's data directory holds
// while a dispatcher uses it (docs/decisions.md, Operations: one process per data directory).
const lockFileName = "fairdispatch.lock"

// errDataDirInUse reports that another process holds the data directory.
var errDataDirInUse = errors.New("data directory in use")

// dataDirLock is an exclusive lock on a data directory, held until Release.
type dataDirLock struct {
	f *os.File
}

// lockDataDir creates dir if needed and takes an exclusive, non-blocking
// flock(2) on dir/fairdispatch.lock, then writes this process's pid, host and
// start time into it. When another process holds the lock, it returns an error
// wrapping errDataDirInUse that names the directory and the holder as that
// process recorded it. The kernel drops the lock when the process dies, so a
// crash leaves nothing to clean up.
func lockDataDir(dir string, now time.Time) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		h := strings.TrimSpace(string(holder))
		if h == "" {
			h = "a process that has not recorded itself yet"
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			name := dir
			if abs, err := filepath.Abs(dir); err == nil && abs != dir {
				name += " (" + abs + ")"
			}
			return nil, fmt.Errorf("--data-dir %s: %w by %s; one dispatcher per data directory: stop it, or give this one another --data-dir",
				name, errDataDirInUse, h)
		}
		return nil, fmt.Errorf("--data-dir %s: lock %s: %w", dir, path, err)
	}
	host, _ := os.Hostname()
	rec := fmt.Sprintf("pid %d on host %s since %s\n", os.Getpid(), host, now.UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(rec), 0)
	}
	return &dataDirLock{f: f}, nil
}

// Release drops the lock. The file stays: removing it would let a process
// that opened the old file and one that creates a new file both hold "the" lock.
func (l *dataDirLock) Release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close()
}
