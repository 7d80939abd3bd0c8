package main

import (
	"context"
	"os"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"fairdispatch/configs/livepolicy"
	"fairdispatch/internal/natstest"
)

// TestDemoPolicyReplacesAnEarlierRunsPolicy: `make run` and then `make run
// DEMO=keys` share ./data, and the bucket's revision wins over
// --policy-config; the demo must show its own file, not the earlier run's.
func TestDemoPolicyReplacesAnEarlierRunsPolicy(t *testing.T) {
	_, nc := natstest.StartServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := livepolicy.Open(ctx, js, "fairdispatch_policy", livepolicy.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	classes, err := os.ReadFile("../../configs/policy-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile("../../configs/policy-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Seed(ctx, classes); err != nil {
		t.Fatal(err)
	}
	if err := demoPolicy(ctx, store, "policy-keys.yaml", keys); err != nil {
		t.Fatal(err)
	}
	cur, err := store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(cur.YAML) != string(keys) || cur.Revision != 2 {
		t.Fatalf("bucket holds revision %d with the %d-byte policy, want revision 2 with the demo's file", cur.Revision, len(cur.YAML))
	}
	// The same file again makes no new revision.
	if err := demoPolicy(ctx, store, "policy-keys.yaml", keys); err != nil {
		t.Fatal(err)
	}
	if cur, err = store.Get(ctx); err != nil || cur.Revision != 2 {
		t.Fatalf("after a second demo run: revision %d (%v), want 2", cur.Revision, err)
	}
}
