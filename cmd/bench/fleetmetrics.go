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
	// TTFTp99Tenant is the TTFT p99 of each tenant's requests.
	TTFTp99Tenant map[string]float64 `json:"ttft_p99_by_tenant_s,omitempty"`
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

// fairness is the tenants' split while the fleet was backlogged: each
// tenant's service against the weighted max-min fair allocation of the
// window's service given what each asked for (as Kubernetes' fair-queuing
// tests compare with a reference allocation): a tenant's weight's part of
// the service, or all it asked when that is less, what it leaves going to
// the others by their weights. When every tenant asks for more than its
// weight's part this is share against weight share; a light tenant's due is
// all it asked.
type fairness struct {
	// From and To bound the window, in seconds from the first publication.
	From float64 `json:"from_s"`
	To   float64 `json:"to_s"`
	// Jain is Jain's index of service over fair share (the tenants with a
	// share): 1 when each got exactly its due; MaxDev the largest
	// |service / share − 1|.
	Jain   float64 `json:"jain"`
	MaxDev float64 `json:"max_deviation"`
	// Tenants in key order, with their demand, service and fair share of
	// the window, in prefill tokens computed.
	Tenants []tenantShare `json:"tenants"`
	// Backlogged names the tenants that had a request published and not
	// started at every moment of the window, and BackloggedDev is the
	// largest |share / weight share − 1| among them, their share of their
	// service. With an engine-side queue (every baseline) that is who waits;
	// behind fairdispatch a light tenant's request waiting a moment in an
	// engine's queue after its dispatch counts too, though it was given all
	// it asked: hence the max-min comparison above.
	Backlogged    []string `json:"backlogged"`
	BackloggedDev float64  `json:"backlogged_max_deviation"`
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
	byTenant := map[string][]float64{}
	for _, c := range cs {
		if c.Tenant != "" {
			byTenant[c.Tenant] = append(byTenant[c.Tenant], sec(c.TTFT))
		}
	}
	if len(byTenant) > 0 {
		m.TTFTp99Tenant = map[string]float64{}
		for k, v := range byTenant {
			m.TTFTp99Tenant[k] = quantile(v, 0.99)
		}
	}
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
// an engine's), if it lasts at least minWindow. A tenant is backlogged
// throughout when it had a request waiting at every moment of it. Service
// is the cost (prefill tokens computed) of the requests started in the
// window; a tenant's demand the cost of its requests waiting at the window's
// start or published in it. nil without tenants or such a window.
func tenantFairness(cs []loadgen.Completion, first time.Time, speedup float64, engines int, weights map[string]float64) *fairness {
	type ev struct {
		at     time.Time
		delta  int
		tenant string
	}
	var evs []ev
	var lastPub time.Time
	for _, c := range cs {
		if c.Tenant == "" {
			return nil
		}
		evs = append(evs, ev{c.PublishedAt, +1, c.Tenant}, ev{c.StartedAt, -1, c.Tenant})
		if c.PublishedAt.After(lastPub) {
			lastPub = c.PublishedAt
		}
	}
	// At equal times a publication comes first: a request started the
	// moment it arrived never makes its tenant look idle.
	sort.SliceStable(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].delta > evs[j].delta
	})
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
	// Who was backlogged throughout: waiting at from, and never idle
	// before to.
	per := map[string]int{}
	through := map[string]bool{}
	inWindow := false
	for _, e := range evs {
		if e.at.After(to) {
			break
		}
		if e.at.After(from) && !inWindow {
			for k, n := range per {
				through[k] = n > 0
			}
			inWindow = true
		}
		if per[e.tenant] += e.delta; inWindow && per[e.tenant] == 0 {
			through[e.tenant] = false
		}
	}
	if !inWindow {
		for k, n := range per {
			through[k] = n > 0
		}
	}
	demand, service := map[string]float64{}, map[string]float64{}
	for _, c := range cs {
		cost := float64(c.PrefillTokens)
		if _, ok := demand[c.Tenant]; !ok {
			demand[c.Tenant] = 0
		}
		waitingAtFrom := !c.PublishedAt.After(from) && c.StartedAt.After(from)
		publishedIn := c.PublishedAt.After(from) && !c.PublishedAt.After(to)
		if waitingAtFrom || publishedIn {
			demand[c.Tenant] += cost
		}
		if c.StartedAt.After(from) && !c.StartedAt.After(to) {
			service[c.Tenant] += cost
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
	var sx, sxx, bw, bs float64
	n := 0
	for i, k := range keys {
		f.Tenants = append(f.Tenants, tenantShare{Key: k, Weight: w[i], Demand: d[i], Service: service[k], Fair: fair[i]})
		if fair[i] > 0 {
			x := service[k] / fair[i]
			sx, sxx, n = sx+x, sxx+x*x, n+1
			f.MaxDev = max(f.MaxDev, math.Abs(x-1))
		}
		if through[k] {
			f.Backlogged = append(f.Backlogged, k)
			bw += w[i]
			bs += service[k]
		}
	}
	if n > 0 && sxx > 0 {
		f.Jain = sx * sx / (float64(n) * sxx)
	}
	for i, k := range keys {
		if through[k] && bs > 0 {
			f.BackloggedDev = max(f.BackloggedDev, math.Abs((service[k]/bs)/(w[i]/bw)-1))
		}
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
