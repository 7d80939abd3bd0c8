package configs

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// EDF (earliest deadline first) orders a lane by the request's effective
// deadline (docs/design.md, Deadlines), then by strict tier and FCFS; a
// request without any deadline goes after every one that has one.
const EDF QueuePolicy = "edf"

// Budget is a token budget (docs/design.md, Token budgets): a token bucket
// of Rate tokens per second holding at most Burst tokens, charged with the
// DRR cost at dispatch and corrected by settlement.
type Budget struct {
	// Rate is the refill, in cost units (uncached tokens) per second: > 0, at
	// most MaxTokens.
	Rate float64
	// Burst is the bucket's size, in cost units: 1 to MaxTokens; default one
	// second of Rate (at least 1).
	Burst uint64
	// WorkConserving lets a key over its budget be served when nothing else
	// anywhere is dispatchable; such a dispatch is not charged to the budget.
	WorkConserving bool
}

// YAML keys of the extensions (docs/config.md, Schema).
const (
	keyDeadlineMs     = "deadline_ms"
	keyKeyDeadlines   = "key_deadlines_ms"
	keyShed           = "shed_unreachable"
	keyDefKeyBudget   = "default_key_budget"
	keyKeyBudgets     = "key_budgets"
	keySheddable      = "sheddable"
	keyMaxPreemptions = "max_preemptions"
	keyPreemptAfter   = "preempt_after_ms"
	keyMinShare       = "min_share"

	keyRate     = "tokens_per_second"
	keyBurst    = "burst"
	keyConserve = "work_conserving"
	budgetNone  = "unlimited"
)

var (
	extensionKeys = []string{keyDeadlineMs, keyKeyDeadlines, keyShed, keyDefKeyBudget, keyKeyBudgets,
		keySheddable, keyMaxPreemptions, keyPreemptAfter, keyMinShare}
	budgetKeys = []string{keyRate, keyBurst, keyConserve}
)

// DefaultMaxPreemptions is how often a request of a sheddable class may be
// preempted when max_preemptions is not given.
const DefaultMaxPreemptions = 3

// MaxMaxPreemptions bounds max_preemptions.
const MaxMaxPreemptions = 100

// Budgeted reports whether any key of the class has a budget.
func (c *Class) Budgeted() bool { return c.DefaultKeyBudget != nil || len(c.KeyBudgets) > 0 }

// KeyWeight returns key's weight in the class: its key_weights entry, else
// default_key_weight (1 when unset, as the scheduler takes it).
func (c *Class) KeyWeight(key string) float64 {
	if w, ok := c.KeyWeights[key]; ok {
		return w
	}
	if c.DefaultKeyWeight > 0 {
		return c.DefaultKeyWeight
	}
	return 1
}

// KeyBudget returns key's budget in the class, or nil when the key is
// unlimited.
func (c *Class) KeyBudget(key string) *Budget {
	if b, ok := c.KeyBudgets[key]; ok {
		return b // nil: listed as unlimited
	}
	return c.DefaultKeyBudget
}

// KeyDeadline returns the deadline in milliseconds after publication that
// applies to key's requests by the policy (the key's, else the class's) and
// whether there is one; a request's own Dispatch-Deadline-Ms is combined by
// the caller: the tightest wins.
func (c *Class) KeyDeadline(key string) (uint64, bool) {
	if ms, ok := c.KeyDeadlinesMs[key]; ok {
		if c.DeadlineMs != nil {
			return min(ms, *c.DeadlineMs), true
		}
		return ms, true
	}
	if c.DeadlineMs != nil {
		return *c.DeadlineMs, true
	}
	return 0, false
}

// extensions reads the class fields of docs/config.md, Schema beyond the
// seed's: deadlines, shedding, budgets, preemption and tier floors.
func (w *walker) extensions(c *rawClass, fields map[string]field, path string) {
	if f, ok := fields[keyDeadlineMs]; ok {
		if v, ok := w.deadline(f.val, join(path, keyDeadlineMs)); ok {
			c.DeadlineMs = &v
		}
	}
	if f, ok := fields[keyKeyDeadlines]; ok {
		c.KeyDeadlinesMs = map[string]uint64{}
		w.keyMap(f.val, join(path, keyKeyDeadlines), "deadline in milliseconds", func(n *yaml.Node, key, p string) {
			if v, ok := w.deadline(n, p); ok {
				c.KeyDeadlinesMs[key] = v
			}
		})
	}
	if f, ok := fields[keyShed]; ok {
		c.ShedUnreachable, _ = w.bool(f.val, join(path, keyShed))
	}
	if f, ok := fields[keyDefKeyBudget]; ok {
		p := join(path, keyDefKeyBudget)
		if b, ok := w.budget(f.val, p, false); ok {
			c.DefaultKeyBudget = b
		}
	}
	if f, ok := fields[keyKeyBudgets]; ok {
		c.KeyBudgets = map[string]*Budget{}
		w.keyMap(f.val, join(path, keyKeyBudgets), "budget", func(n *yaml.Node, key, p string) {
			if b, ok := w.budget(n, p, true); ok {
				c.KeyBudgets[key] = b
			}
		})
	}
	if f, ok := fields[keySheddable]; ok {
		c.Sheddable, _ = w.bool(f.val, join(path, keySheddable))
	}
	c.MaxPreemptions = DefaultMaxPreemptions
	if f, ok := fields[keyMaxPreemptions]; ok {
		p := join(path, keyMaxPreemptions)
		if v, ok := w.uint(f.val, p); ok {
			if v > MaxMaxPreemptions {
				w.add(f.val.Line, p, "must be at most %d, got %d", MaxMaxPreemptions, v)
			}
			c.MaxPreemptions = uint32(min(v, MaxMaxPreemptions))
			if !c.Sheddable {
				w.add(f.val.Line, p, "only a sheddable class is preempted: set sheddable: true or leave max_preemptions out")
			}
		}
	}
	if f, ok := fields[keyPreemptAfter]; ok {
		p := join(path, keyPreemptAfter)
		if v, ok := w.deadline(f.val, p); ok {
			c.PreemptAfterMs = &v
			if c.Sheddable {
				w.add(f.val.Line, p, "a sheddable class does not preempt: leave preempt_after_ms out or sheddable false")
			}
		}
	}
	if f, ok := fields[keyMinShare]; ok {
		c.MinShare = w.minShare(f.val, join(path, keyMinShare))
	}
}

// deadline reads a number of milliseconds: an integer 0 to 2^40.
func (w *walker) deadline(n *yaml.Node, path string) (uint64, bool) {
	return w.uint(n, path)
}

// bool reads a YAML boolean.
func (w *walker) bool(n *yaml.Node, path string) (bool, bool) {
	line := n.Line
	n = deref(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		w.add(line, path, "must be true or false, got %s", describe(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		w.add(line, path, "must be true or false: %v", err)
		return false, false
	}
	return b, true
}

// keyMap reads a mapping from fairness key to a value read by each (what
// names the value in problems); it reports whether n was a mapping.
func (w *walker) keyMap(n *yaml.Node, path, what string, each func(v *yaml.Node, key, path string)) bool {
	n, ok := w.mappingNode(n, path, "from fairness key to "+what)
	if !ok {
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || !ValidKey(k.Value) {
			w.add(k.Line, path, "keys must be fairness keys (1 to 64 bytes of [A-Za-z0-9_.:@-]), got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if repeated(w, seen, k.Value, k.Line, p, "key") {
			continue
		}
		each(v, k.Value, p)
	}
	return true
}

// budget reads {tokens_per_second, burst, work_conserving}, or, where
// unlimited is allowed (a key of key_budgets), the string "unlimited" (nil).
func (w *walker) budget(n *yaml.Node, path string, unlimited bool) (*Budget, bool) {
	if d := deref(n); unlimited && d.Kind == yaml.ScalarNode && d.ShortTag() == "!!str" {
		if d.Value != budgetNone {
			w.add(n.Line, path, "must be a budget mapping or %q, got %q", budgetNone, d.Value)
			return nil, false
		}
		return nil, true
	}
	fields, ok := w.mapping(n, path, budgetKeys...)
	if !ok {
		return nil, false
	}
	b := &Budget{}
	good := true
	if f, ok := fields[keyRate]; ok {
		p := join(path, keyRate)
		if v, ok := w.float(f.val, p); ok {
			if v <= 0 || v > MaxTokens {
				w.add(f.val.Line, p, "must be in (0, 2^40], got %v", v)
				good = false
			}
			b.Rate = v
		} else {
			good = false
		}
	} else {
		w.add(n.Line, join(path, keyRate), "required")
		good = false
	}
	b.Burst = uint64(max(1, math.Ceil(min(b.Rate, MaxTokens))))
	if f, ok := fields[keyBurst]; ok {
		p := join(path, keyBurst)
		if v, ok := w.uint(f.val, p); ok {
			if v == 0 {
				w.add(f.val.Line, p, "must be > 0")
				good = false
			}
			b.Burst = v
		} else {
			good = false
		}
	}
	if f, ok := fields[keyConserve]; ok {
		b.WorkConserving, _ = w.bool(f.val, join(path, keyConserve))
	}
	return b, good
}

// minShare reads min_share: a mapping from strict tier (an integer 0 to
// 2^31-1, what Dispatch-Strict-Priority can carry) to a share in (0, 1); the
// shares add up to less than 1.
func (w *walker) minShare(n *yaml.Node, path string) map[uint32]float64 {
	line := n.Line
	n, ok := w.mappingNode(n, path, "from strict tier to share")
	if !ok {
		return nil
	}
	out := map[uint32]float64{}
	seen := map[uint64]int{}
	sum := 0.0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		t, err := strconv.ParseUint(k.Value, 10, 31)
		if k.Kind != yaml.ScalarNode || err != nil {
			w.add(k.Line, path, "keys must be strict tiers (integers 0 to 2147483647, as Dispatch-Strict-Priority), got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		if repeated(w, seen, t, k.Line, p, "tier") {
			continue
		}
		s, ok := w.float(v, p)
		if !ok {
			continue
		}
		if s <= 0 || s >= 1 {
			w.add(v.Line, p, "must be in (0, 1), got %v", s)
			continue
		}
		out[uint32(t)] = s
		sum += s
	}
	if sum >= 1 {
		w.add(line, path, "the shares must add up to less than 1, got %v", sum)
	}
	return out
}

// extensionDefault reports whether a field of extensionFields is at its
// default, which a class the new policy adds does not list.
func extensionDefault(f string) bool {
	_, v, _ := strings.Cut(f, " ")
	return v == "-" || v == "false" || v == "0" || f == fmt.Sprintf("max_preemptions %d", DefaultMaxPreemptions)
}

// extensionFields renders the extensions for Diff and Matrix, in a fixed
// order, "-" where unset.
func extensionFields(c Class) []string {
	out := []string{"deadline_ms " + uintOr(c.DeadlineMs), fmt.Sprintf("key_deadlines %d", len(c.KeyDeadlinesMs)),
		"shed_unreachable " + strconv.FormatBool(c.ShedUnreachable), "default_key_budget " + budgetString(c.DefaultKeyBudget),
		"key_budgets " + keyBudgetsString(c.KeyBudgets), "sheddable " + strconv.FormatBool(c.Sheddable),
		"preempt_after_ms " + uintOr(c.PreemptAfterMs), fmt.Sprintf("max_preemptions %d", c.MaxPreemptions)}
	tiers := make([]uint32, 0, len(c.MinShare))
	for t := range c.MinShare {
		tiers = append(tiers, t)
	}
	sort.Slice(tiers, func(i, j int) bool { return tiers[i] < tiers[j] })
	ms := "-"
	for i, t := range tiers {
		if i == 0 {
			ms = ""
		} else {
			ms += ","
		}
		ms += fmt.Sprintf("%d=%g", t, c.MinShare[t])
	}
	return append(out, "min_share "+ms)
}

func budgetString(b *Budget) string {
	if b == nil {
		return "-"
	}
	s := fmt.Sprintf("%g/s burst %d", b.Rate, b.Burst)
	if b.WorkConserving {
		s += " work_conserving"
	}
	return s
}

func keyBudgetsString(m map[string]*Budget) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += "; "
		}
		b := "unlimited"
		if m[k] != nil {
			b = budgetString(m[k])
		}
		s += k + "=" + b
	}
	return s
}
