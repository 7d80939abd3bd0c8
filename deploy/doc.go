// Package deploy holds what operators load into their own monitoring: the
// Grafana dashboard (grafana/fairdispatch.json) and the Prometheus alert rules
// with their unit tests (prometheus/alerts.yml, prometheus/alerts_test.yml).
// It has no code; its tests check those files with promtool and against the
// metrics the dispatcher registers (docs/operations.md, Prometheus and
// Grafana).
package deploy
