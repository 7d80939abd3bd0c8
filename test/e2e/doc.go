// Package e2e holds black-box tests of fairdispatch against real nats-servers:
// the dispatcher runs as a subprocess (so it can be killed with SIGKILL), mock
// workers and producers run in the test process and speak only the wire
// contract of docs/protocol.md.
//
// Tests run one at a time, except those marked t.Parallel: they assert no
// bound on time (only on what happened) and spend most of their time
// waiting (ack waits, lease TTLs, timeouts) or in CPU work no other test
// measures (builds, bcrypt), so running two at a time after the others
// (go test's -parallel is GOMAXPROCS) shortens the suite without making a
// timed assertion share the machine with them. A test with a bound on
// latency, rate or a share stays serial.
package e2e
