// Package e2e holds black-box tests of fairdispatch against real nats-servers:
// the dispatcher runs as a subprocess (so it can be killed with SIGKILL), mock
// workers and producers run in the test process and speak only the wire
// contract of docs/protocol.md.
package e2e
