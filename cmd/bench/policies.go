package main

import _ "embed"

// The policies of the runs, as files a reader can load into a dispatcher
// of their own (--policy-config cmd/bench/policies/...).
var (
	//go:embed policies/throughput.yaml
	throughputPolicy string
	//go:embed policies/hold.yaml
	holdPolicy string
)
