package main

import (
	"math"
	"slices"
	"sort"
	"time"

	"fairdispatch/loadgen"
)

// fleetMetrics are the figures of one replay (one system at one load), in
// the engines' time (wall time × the engines' speedup: seconds of the
// modelled engines).
type fleetMetrics struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	// TTFT and E2E percentiles in seconds: from publication to the
	// engine's first token (the completion record's first_token_at) and to
	// its last.
	TTFTp50 float64 `json:"ttft_p50_s"`
	TTFTp90 float64 `json:"ttft_p90_s"`
	TTFTp99 float64 `json:"ttft_p99_s"`
	E2Ep50  float64 `json:"e2e_p50_s"`
	E2Ep99  float64 `json:"e2e_p99_s"`
	// OutputTPS is output tokens per second from the first publication to
	// the last completion.
	OutputTPS float64 `json:"output_tokens_per_s"`
	// Throughput is completions per second over the same span.
	Throughput float64 `json:"requests_per_s"`
	// HitRate is cached over prompt tokens (the engines' records); Ideal
	// the trace's reuse with an unbounded cache shared by the fleet.
	HitRate float64 `json:"hit_rate"`
	Ideal   float64 `json:"ideal_hit_rate"`
	// HopP50 is the median from publication to the engine's receipt (the
	// NATS hops and the middle process, plus any queueing in it).
	HopP50 float64 `json:"hop_p50_s"`
	// Saturated is the completion rate of a saturated replay (the capacity
	// run only), in requests per second: the middle 80% of the completions
	// over the time they took.
	Saturated float64 `json:"saturated_requests_per_s,omitempty"`
	// Fair is the tenants' service while the fleet was backlogged; nil
	// when it never was.
	Fair *fairness `json:"fairness,omitempty"`
}

// fairness compares the tenants' service in a backlogged window with the
// weighted max-min fair allocation of that service given what each tenant
// asked for in the window (as Kubernetes' fair-queuing tests check against a
// reference allocation).
type fairness struct {
	// From and To bound the window, in seconds from the first publication.
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
	// Tenants in key order, with their demand, service and fair share of
	// the window, in prefill tokens computed.
	Tenants []tenantShare `json:"tenants"`
	// Jain is Jain's index of service over fair share: 1 when every tenant
	// got exactly its due.
	Jain float64 `json:"jain"`
	// MaxDev is the largest |service / fair − 1| over the tenants.
	MaxDev float64 `json:"max_deviation"`
}

// tenantShare is one tenant of a fairness window.
type tenantShare struct {
	Key     string  `json:"key"`
	Weight  float64 `json:"weight"`
	Demand  float64 `json:"demand"`
	Service float64 `json:"service"`
	Fair    float64 `json:"fair"`
}

// backlogThreshold is the fleet's backlog (requests published and not yet
// started on an engine, wherever they wait) per engine above which the
// fleet counts as backlogged.
const backlogThreshold = 2

// minWindow is the shortest backlogged window measured, in the engines'
// seconds: a shorter burst holds too few requests of each tenant to say
// anything about shares.
const minWindow = 30.0

// computeFleetMetrics digests a replay's completions. speedup converts wall
// time to the engines'; weights are the tenants' (a tenant not listed weighs
// 1); engines is the fleet's size.
func computeFleetMetrics(cs []loadgen.Completion, requests int, speedup, ideal float64, engines int, weights map[string]float64) fleetMetrics {
	m := fleetMetrics{Requests: requests, Completed: len(cs), Ideal: ideal}
	if len(cs) == 0 {
		return m
	}
	sec := func(d time.Duration) float64 { return d.Seconds() * speedup }
	var ttft, e2e, hop []float64
	var prompt, cached, out uint64
	first, last := cs[0].PublishedAt, cs[0].FinishedAt
	for _, c := range cs {
		ttft = append(ttft, sec(c.TTFT))
		e2e = append(e2e, sec(c.Latency))
		hop = append(hop, sec(c.ReceivedAt.Sub(c.PublishedAt)))
		prompt += c.PromptTokens
		cached += min(c.CachedTokens, c.PromptTokens)
		out += c.OutputTokens
		if c.PublishedAt.Before(first) {
			first = c.PublishedAt
		}
		if c.FinishedAt.After(last) {
			last = c.FinishedAt
		}
	}
	m.TTFTp50, m.TTFTp90, m.TTFTp99 = quantile(ttft, 0.5), quantile(ttft, 0.9), quantile(ttft, 0.99)
	m.E2Ep50, m.E2Ep99 = quantile(e2e, 0.5), quantile(e2e, 0.99)
	m.HopP50 = quantile(hop, 0.5)
	if span := sec(last.Sub(first)); span > 0 {
		m.OutputTPS = float64(out) / span
		m.Throughput = float64(len(cs)) / span
	}
	if prompt > 0 {
		m.HitRate = float64(cached) / float64(prompt)
	}
	m.Fair = tenantFairness(cs, first, speedup, engines, weights)
	return m
}

// quantile returns the nearest-rank q-quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// tenantFairness measures the tenants' split while the fleet is backlogged:
// over the longest stretch, before the last publication (after it the
// backlog only drains), during which more than backlogThreshold requests per
// engine were published and not started (waiting in a dispatcher's queue or
// an engine's). A tenant's demand is the cost (prefill tokens computed) of
// its requests waiting at the window's start or published in it; its
// service the cost of its requests started in it. nil without tenants or a
// backlog.
func tenantFairness(cs []loadgen.Completion, first time.Time, speedup float64, engines int, weights map[string]float64) *fairness {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	var lastPub time.Time
	for _, c := range cs {
		if c.Tenant == "" {
			return nil
		}
		evs = append(evs, ev{c.PublishedAt, +1}, ev{c.StartedAt, -1})
		if c.PublishedAt.After(lastPub) {
			lastPub = c.PublishedAt
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var from, to, start time.Time
	waiting, above := 0, false
	for _, e := range evs {
		if e.at.After(lastPub) {
			break
		}
		waiting += e.delta
		switch now := waiting > backlogThreshold*engines; {
		case now && !above:
			start, above = e.at, true
		case !now && above:
			above = false
			if e.at.Sub(start) > to.Sub(from) {
				from, to = start, e.at
			}
		}
	}
	if above && lastPub.Sub(start) > to.Sub(from) {
		from, to = start, lastPub
	}
	if to.Sub(from).Seconds()*speedup < minWindow {
		return nil
	}
	demand, service := map[string]float64{}, map[string]float64{}
	for _, c := range cs {
		cost := float64(c.PrefillTokens)
		waitingAtFrom := !c.PublishedAt.After(from) && c.StartedAt.After(from)
		publishedIn := c.PublishedAt.After(from) && !c.PublishedAt.After(to)
		if waitingAtFrom || publishedIn {
			demand[c.Tenant] += cost
		}
		if c.StartedAt.After(from) && !c.StartedAt.After(to) {
			service[c.Tenant] += cost
		}
		if _, ok := demand[c.Tenant]; !ok {
			demand[c.Tenant] = 0
		}
	}
	var keys []string
	total := 0.0
	for k := range demand {
		keys = append(keys, k)
		total += service[k]
	}
	slices.Sort(keys)
	f := &fairness{From: from.Sub(first).Seconds() * speedup, To: to.Sub(first).Seconds() * speedup}
	w := make([]float64, len(keys))
	d := make([]float64, len(keys))
	for i, k := range keys {
		w[i], d[i] = 1, demand[k]
		if v, ok := weights[k]; ok {
			w[i] = v
		}
	}
	fair := waterFill(total, w, d)
	var sx, sxx float64
	n := 0
	for i, k := range keys {
		f.Tenants = append(f.Tenants, tenantShare{Key: k, Weight: w[i], Demand: d[i], Service: service[k], Fair: fair[i]})
		if fair[i] <= 0 {
			continue
		}
		x := service[k] / fair[i]
		sx += x
		sxx += x * x
		n++
		f.MaxDev = max(f.MaxDev, math.Abs(x-1))
	}
	if n > 0 && sxx > 0 {
		f.Jain = sx * sx / (float64(n) * sxx)
	}
	return f
}

// waterFill divides capacity among claimants with weights w and demands d:
// the weighted max-min fair allocation (each gets capacity in proportion to
// its weight, never more than its demand, and what a capped one leaves goes
// to the others the same way).
func waterFill(capacity float64, w, d []float64) []float64 {
	out := make([]float64, len(w))
	open := make([]bool, len(w))
	for i := range w {
		open[i] = w[i] > 0 && d[i] > 0
	}
	for capacity > 1e-9 {
		sw := 0.0
		for i := range w {
			if open[i] {
				sw += w[i]
			}
		}
		if sw == 0 {
			break
		}
		// The level at which the first open claimant is capped, or all the
		// capacity.
		level := capacity / sw
		for i := range w {
			if open[i] {
				level = min(level, (d[i]-out[i])/w[i])
			}
		}
		for i := range w {
			if open[i] {
				out[i] += level * w[i]
				capacity -= level * w[i]
				if d[i]-out[i] <= 1e-9*max(1, d[i]) {
					open[i] = false
				}
			}
		}
	}
	return out
}
