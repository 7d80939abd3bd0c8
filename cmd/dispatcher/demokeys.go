package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"fairdispatch/configs"
	"fairdispatch/loadgen"
)

// demoTenants are the keys demo's tenants: flood publishes six requests for
// every three of vip and one of quiet. Under configs/policy-keys.yaml vip
// weighs 3 and the others 1, so while all three wait they share the worker
// 1:3:1 whatever they publish.
var demoTenants = []loadgen.Tenant{{Key: "flood", Weight: 6}, {Key: "vip", Weight: 3}, {Key: "quiet", Weight: 1}}

// runKeysDemo runs the fairness keys demo (--demo-scenario keys,
// docs/design.md, Fairness keys): one mock worker running four sequences, and
// --demo-requests 512-token requests of the policy's class "shared" (else its
// first class) spread over three tenants, released together. It prints completions per tenant as they
// happen and, at the end, each tenant's part of the completions made while
// every tenant still had requests to complete.
func runKeysDemo(ctx context.Context, nc *nats.Conn, s *settings, pol *configs.Policy, out io.Writer, log zerolog.Logger) error {
	class := &pol.Classes[0]
	for i := range pol.Classes {
		if pol.Classes[i].Name == "shared" {
			class = &pol.Classes[i]
		}
	}
	n := s.demoPerClass
	total := 0
	for _, t := range demoTenants {
		total += t.Weight
	}
	fmt.Fprintf(out, "\ndemo (keys): one mock worker (4 sequences), %d requests of 512 tokens released together,\n", n)
	fmt.Fprintf(out, "      published by three tenants (Dispatch-Fairness-Key): flood %d%%, vip %d%%, quiet %d%%\n",
		100*demoTenants[0].Weight/total, 100*demoTenants[1].Weight/total, 100*demoTenants[2].Weight/total)
	fmt.Fprintf(out, "      to class %s of policy %s; requests wait out the %v start-up grace first\n\n", class.Name, s.policy, s.grace)
	res, err := runDemoLoad(ctx, nc, s, loadgen.Config{
		Classes: []loadgen.ClassCount{{Class: class.Name, Count: n}},
		Tenants: demoTenants,
	}, out, log, func(b *strings.Builder, p loadgen.Progress) {
		for _, t := range demoTenants {
			fmt.Fprintf(b, "  %s completed %4d", t.Key, p.CompletedByKey[t.Key])
		}
	})
	if res == nil {
		return err
	}
	got, window := res.KeyShareBacklogged()
	fmt.Fprintf(out, "Completed %d of %d. Of the first %d completions, while every tenant still had requests waiting:\n", len(res.Completions), n, window)
	weight := class.KeyWeight
	var sumW float64
	for _, t := range demoTenants {
		sumW += weight(t.Key)
	}
	for _, t := range demoTenants {
		wt := weight(t.Key)
		fmt.Fprintf(out, "  %-6s %4d (%4.1f%%)   published %2d%% of the requests, key weight %g: due %4.1f%%\n",
			t.Key, got[t.Key], 100*float64(got[t.Key])/float64(max(window, 1)), 100*t.Weight/total, wt, 100*wt/sumW)
	}
	fmt.Fprintln(out, "The flooding tenant does not crowd the others out: each backlogged key gets its weight's share")
	fmt.Fprintln(out, "(see top_keys and key_fairness in /debug/queues, fairdispatch_key_fairness_jain in /metrics).")
	return err
}
