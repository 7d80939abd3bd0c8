//go:build !unix

package main

import "time"

// dataDirLock is a no-op where flock(2) does not exist: only unix systems
// lock the data directory (docs/decisions.md, Operations: one process per data directory).
type dataDirLock struct{}

func lockDataDir(string, time.Time) (*dataDirLock, error) { return &dataDirLock{}, nil }

// Release does nothing.
func (*dataDirLock) Release() {}
