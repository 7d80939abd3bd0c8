//go:build !race

package scheduler

const raceOn = false
