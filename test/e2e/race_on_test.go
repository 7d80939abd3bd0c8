//go:build race

package e2e

// raceBuild makes the dispatcher binary under test race-enabled when the tests are.
const raceBuild = true
