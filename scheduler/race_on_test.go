//go:build race

package scheduler

// raceOn: the race detector slows the replays of TestShedCounterfactual
// about tenfold, so it replays fewer.
const raceOn = true
