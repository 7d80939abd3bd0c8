package loadgen

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"fairdispatch/naming"
	"fairdispatch/wire"
)

// Order is the order in which requests of the classes are published.
type Order string

// The publication orders.
const (
	// OrderAlternating publishes one request of each class in turn, skipping
	// classes that are used up.
	OrderAlternating Order = "alternating"
	// OrderSequential publishes every request of the first class, then the next.
	OrderSequential Order = "sequential"
	// OrderRandom publishes in a random order drawn from Config.Seed.
	OrderRandom Order = "random"
)

// Defaults applied by [Run] to zero fields of [Config].
const (
	// DefaultPrefix is the subject prefix, naming.DefaultPrefix.
	DefaultPrefix           = naming.DefaultPrefix
	DefaultWindow           = 256
	DefaultProgressInterval = 500 * time.Millisecond
	// DefaultOutcomeWait is Config.OutcomeWait's default.
	DefaultOutcomeWait = time.Second
)

// ClassCount is a number of requests to publish to one class.
type ClassCount struct {
	// Class is the subject token: the request goes to <prefix>.req.<Class>.
	Class string
	// Count is the number of requests, >= 0.
	Count int
}

// ParseClassCount parses "name:count".
func ParseClassCount(s string) (ClassCount, error) {
	name, count, ok := strings.Cut(s, ":")
	if !ok {
		return ClassCount{}, fmt.Errorf("loadgen: class %q: want name:count", s)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return ClassCount{}, fmt.Errorf("loadgen: class %q: count must be a non-negative integer", s)
	}
	if !wire.ValidToken(name) {
		return ClassCount{}, fmt.Errorf("loadgen: class %q: name must be [A-Za-z0-9_-]+", s)
	}
	return ClassCount{Class: name, Count: n}, nil
}

// Tenant is a fairness key and its part of the requests.
type Tenant struct {
	// Key is sent as Dispatch-Fairness-Key: 1 to 64 bytes of [A-Za-z0-9_.:@-].
	Key string
	// Weight is the tenant's part of every class's requests, >= 1: with a:10
	// and b:1, ten of every eleven requests are a's.
	Weight int
}

// ParseTenants parses "key:weight,key:weight,..." (a weight may be omitted: 1).
func ParseTenants(s string) ([]Tenant, error) {
	var out []Tenant
	for _, part := range strings.Split(s, ",") {
		key, w, ok := strings.Cut(part, ":")
		n := 1
		if ok {
			var err error
			if n, err = strconv.Atoi(w); err != nil || n < 1 {
				return nil, fmt.Errorf("loadgen: tenant %q: weight must be an integer >= 1", part)
			}
		}
		if !wire.ValidKey(key) {
			return nil, fmt.Errorf("loadgen: tenant %q: key must be 1 to 64 bytes of [A-Za-z0-9_.:@-]", part)
		}
		out = append(out, Tenant{Key: key, Weight: n})
	}
	return out, nil
}

// Config describes a workload.
type Config struct {
	// Prefix is the subject prefix, default "dispatch". The request stream
	// is named after it ("<Q>_REQ", package naming), as the dispatcher's.
	Prefix string
	// Classes lists the classes and their request counts, in the order used by
	// OrderAlternating and OrderSequential. Required, names unique.
	Classes []ClassCount
	// Rate is the publication rate in requests per second; 0 publishes
	// everything at once (bounded only by Window).
	Rate float64
	// ISL is Dispatch-ISL-Tokens of every request, in tokens.
	ISL uint64
	// Cached is Dispatch-Cached-Tokens of every request (omitted when 0).
	Cached uint64
	// OutputTokens is Dispatch-Output-Tokens (read by the mock worker); 0 omits it.
	OutputTokens int
	// Order is the publication order, default OrderAlternating.
	Order Order
	// Seed seeds OrderRandom; 0 uses the current time.
	Seed uint64
	// Tenants, when not empty, spread every class's requests over fairness
	// keys (Dispatch-Fairness-Key) in proportion to their weights, in a smooth
	// weighted round robin; empty sends no key.
	Tenants []Tenant
	// Pin, when not empty, is Dispatch-Worker of every request.
	Pin string
	// Priority is Dispatch-Priority (seconds of FCFS jump, 0 to 1e6); 0 omits it.
	Priority float64
	// Strict is Dispatch-Strict-Priority (0 to 2^31-1); 0 omits it.
	Strict uint64
	// DeadlineMs is Dispatch-Deadline-Ms (up to 86,400,000); 0 omits it.
	DeadlineMs uint64
	// Timeout bounds the whole run; 0 means only ctx does.
	Timeout time.Duration
	// Window is the most publications awaiting acknowledgement, default 256.
	Window int
	// RunID prefixes every Nats-Msg-Id; default a random id. A subject-token-like string.
	RunID string
	// ProgressInterval is the period of OnProgress calls, default 500ms.
	ProgressInterval time.Duration
	// OnProgress, when set, is called every ProgressInterval and once at the
	// end, from one goroutine.
	OnProgress func(Progress)
	// OutcomeWait bounds how long Run waits, once every request ended, for
	// the "dispatched" outcomes of completed requests still missing one
	// (the dispatcher publishes it on another subject than the worker's
	// record, which can overtake it); default DefaultOutcomeWait. Negative:
	// no wait, for a router that publishes no outcomes. Result.Elapsed does
	// not include the wait.
	OutcomeWait time.Duration
	// Prefixes, when Prefixes.N > 0, makes every request's prompt one of
	// shared prefixes, with Dispatch-Block-Hashes (prefixes.go).
	Prefixes Prefixes
	// Replay, when not nil, publishes a trace (trace.go) instead: its
	// requests, each at its own time, with its own ISL, output tokens,
	// block hashes, class and tenant. Classes is then filled from the
	// requests when empty; Rate, ISL, OutputTokens, Order, Tenants and
	// Prefixes must be left zero.
	Replay *Replay
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Order == "" {
		c.Order = OrderAlternating
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.OutcomeWait == 0 {
		c.OutcomeWait = DefaultOutcomeWait
	}
	var errs []error
	if c.Replay != nil {
		errs = append(errs, c.Replay.check(&c)...)
	}
	if _, err := naming.New(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if len(c.Classes) == 0 {
		errs = append(errs, errors.New("no classes"))
	}
	seen := map[string]bool{}
	for _, cc := range c.Classes {
		if !wire.ValidToken(cc.Class) || cc.Count < 0 {
			errs = append(errs, fmt.Errorf("class %q:%d: want a subject token and a count >= 0", cc.Class, cc.Count))
		}
		if seen[cc.Class] {
			errs = append(errs, fmt.Errorf("class %q listed twice", cc.Class))
		}
		seen[cc.Class] = true
	}
	switch c.Order {
	case OrderAlternating, OrderSequential, OrderRandom:
	default:
		errs = append(errs, fmt.Errorf("order %q: want alternating, sequential or random", c.Order))
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("rate %v: want >= 0", c.Rate))
	}
	seenKey := map[string]bool{}
	for _, tn := range c.Tenants {
		if !wire.ValidKey(tn.Key) || tn.Weight < 1 || seenKey[tn.Key] {
			errs = append(errs, fmt.Errorf("tenant %q:%d: want a distinct fairness key and a weight >= 1", tn.Key, tn.Weight))
		}
		seenKey[tn.Key] = true
	}
	if c.Pin != "" && !wire.ValidToken(c.Pin) {
		errs = append(errs, fmt.Errorf("pin %q: want a worker id", c.Pin))
	}
	if c.Priority < 0 || c.Priority > 1e6 || math.IsNaN(c.Priority) {
		errs = append(errs, fmt.Errorf("priority %v: want 0 to 1e6", c.Priority))
	}
	if c.Strict > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("strict %d: want at most 2^31-1", c.Strict))
	}
	if c.DeadlineMs > 86_400_000 {
		errs = append(errs, fmt.Errorf("deadline %d ms: want at most 86400000", c.DeadlineMs))
	}
	if c.Window < 1 || c.Timeout < 0 || c.ProgressInterval < 0 || c.OutputTokens < 0 {
		errs = append(errs, errors.New("window, timeout, progress interval and output tokens must not be negative (window >= 1)"))
	}
	if c.RunID != "" && !wire.ValidToken(c.RunID) {
		errs = append(errs, fmt.Errorf("run id %q: want [A-Za-z0-9_-]+", c.RunID))
	}
	if err := c.Prefixes.withDefaults(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("loadgen: invalid config: %w", errors.Join(errs...))
	}
	return c, nil
}

// check validates a replay and fills c.Classes from its requests when empty.
func (rp *Replay) check(c *Config) []error {
	var errs []error
	if !(rp.Speedup > 0) || math.IsInf(rp.Speedup, 0) {
		errs = append(errs, fmt.Errorf("replay speedup %v: want > 0", rp.Speedup))
	}
	if c.Rate != 0 || c.ISL != 0 || c.OutputTokens != 0 || len(c.Tenants) > 0 || c.Prefixes.N != 0 {
		errs = append(errs, errors.New("a replay sets its own rate, ISL, output tokens, tenants and prompts: leave them zero"))
	}
	counts := map[string]int{}
	var names []string
	for i, r := range rp.Requests {
		if i > 0 && r.At < rp.Requests[i-1].At {
			errs = append(errs, fmt.Errorf("replay request %d at %v is before the one before it", i, r.At))
			break
		}
		if counts[r.Class] == 0 {
			names = append(names, r.Class)
		}
		counts[r.Class]++
	}
	if len(c.Classes) == 0 {
		for _, n := range names {
			c.Classes = append(c.Classes, ClassCount{Class: n, Count: counts[n]})
		}
	}
	return errs
}
