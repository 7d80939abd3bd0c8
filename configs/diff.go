package configs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Diff describes what changes from policy old to policy new, class by class,
// as a live policy change applies it (docs/design.md, Live policy): one line
// per change, in this order: the default family, the buckets, each class of
// new in ring order that is added ("+ class NAME ...") or changed ("~ class
// NAME: field old -> new, ...", key weights summarised as "key_weights +A -R
// ~C": keys added, removed, reweighted), each class of old that is removed ("- class
// NAME ..."), and the ring order when the kept classes are reordered. It
// returns nil when nothing changes. old may be nil (no policy yet): every
// class is then added.
func Diff(old, new *Policy) []string {
	var out []string
	if old == nil {
		old = &Policy{}
	}
	if old.DefaultFamily != new.DefaultFamily {
		out = append(out, fmt.Sprintf("default family: %s -> %s", dash(old.DefaultFamily), dash(new.DefaultFamily)))
	}
	if ob, nb := bucketsString(old.Buckets), bucketsString(new.Buckets); ob != nb {
		out = append(out, fmt.Sprintf("buckets: %s -> %s", ob, nb))
	}
	byName := func(p *Policy, name string) (Class, bool) {
		for _, c := range p.Classes {
			if c.Name == name {
				return c, true
			}
		}
		return Class{}, false
	}
	var keptOld, keptNew []string
	for _, c := range new.Classes {
		o, ok := byName(old, c.Name)
		if !ok {
			out = append(out, fmt.Sprintf("+ class %s (added): %s", c.Name, strings.Join(classFieldsAdded(c), ", ")))
			continue
		}
		keptNew = append(keptNew, c.Name)
		of, nf := classFields(o), classFields(c)
		var ch []string
		for i := range nf {
			if of[i] != nf[i] {
				k, ov, _ := strings.Cut(of[i], " ")
				_, nv, _ := strings.Cut(nf[i], " ")
				ch = append(ch, fmt.Sprintf("%s %s -> %s", k, ov, nv))
			}
		}
		if kw := keyWeightsDiff(o.KeyWeights, c.KeyWeights); kw != "" {
			ch = append(ch, kw)
		}
		if len(ch) > 0 {
			out = append(out, fmt.Sprintf("~ class %s: %s", c.Name, strings.Join(ch, ", ")))
		}
	}
	for _, c := range old.Classes {
		if _, ok := byName(new, c.Name); !ok {
			out = append(out, fmt.Sprintf("- class %s (removed): its queued requests are resolved again", c.Name))
			continue
		}
		keptOld = append(keptOld, c.Name)
	}
	if !slices.Equal(keptOld, keptNew) {
		out = append(out, fmt.Sprintf("ring order: %s -> %s", strings.Join(keptOld, ", "), strings.Join(keptNew, ", ")))
	}
	return out
}

// classFields renders a class's settings as "key value" pairs, in a fixed
// order, "-" where unset.
func classFields(c Class) []string {
	out := []string{
		"family " + dash(c.Family), "bucket " + dash(c.Bucket), "queue " + string(c.Queue),
		fmt.Sprintf("quantum %d", c.Quantum),
		"busy_threshold " + uintOr(c.PrefillBusyThreshold), "busy_threshold_frac " + floatOr(c.PrefillBusyThresholdFrac),
		"busy_worker_ratio " + floatOr(c.BusyWorkerRatio), "requests/worker " + uintOr(c.RequestLimit),
		"raw_isl_tokens/worker " + uintOr(c.RawISLLimit), "cached_tokens/worker " + uintOr(c.CachedLimit),
		"default_key_weight " + strconv.FormatFloat(c.DefaultKeyWeight, 'g', -1, 64),
		"output_token_weight " + strconv.FormatFloat(c.OutputTokenWeight, 'g', -1, 64),
	}
	return append(out, extensionFields(c)...)
}

// classFieldsAdded is classFields plus the number of key weights, less the
// extensions left at their defaults, for a class the new policy adds.
func classFieldsAdded(c Class) []string {
	all := classFields(c)
	out := slices.Clone(all[:len(all)-len(extensionFields(c))])
	out = append(out, fmt.Sprintf("key_weights %d", len(c.KeyWeights)))
	for _, f := range extensionFields(c) {
		if !extensionDefault(f) {
			out = append(out, f)
		}
	}
	return out
}

// keyWeightsDiff summarises how a class's key weights change: "key_weights
// +A -R ~C" for keys added, removed and reweighted, or "" when none does.
// O(keys).
func keyWeightsDiff(old, new map[string]float64) string {
	var added, removed, changed int
	for k, w := range new {
		ow, ok := old[k]
		switch {
		case !ok:
			added++
		case ow != w:
			changed++
		}
	}
	for k := range old {
		if _, ok := new[k]; !ok {
			removed++
		}
	}
	if added+removed+changed == 0 {
		return ""
	}
	return fmt.Sprintf("key_weights +%d -%d ~%d", added, removed, changed)
}

func bucketsString(bs []Bucket) string {
	if len(bs) == 0 {
		return "-"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%s>=%d", b.Name, b.MinTokens)
	}
	return strings.Join(parts, " ")
}
