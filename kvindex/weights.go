package kvindex

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"fairdispatch/wire"
)

// ParseWeights parses the value of `--kv-tier-weights`: comma-separated
// `tier=weight` pairs, e.g. "device=1,host=0.75,disk=0.5,shared=0.5". Each
// weight is a number in [0, 1]; a tier left out keeps its DefaultWeights
// value; the empty string gives DefaultWeights. Unknown tiers, repeated tiers
// and bad weights are errors, all reported at once.
func ParseWeights(s string) ([wire.NumTiers]float64, error) {
	w := DefaultWeights
	if strings.TrimSpace(s) == "" {
		return w, nil
	}
	var errs []error
	var seen wire.Tiers
	for item := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok {
			errs = append(errs, fmt.Errorf("kv tier weights: %q is not tier=weight", item))
			continue
		}
		t, known := wire.ParseTier(name)
		if !known {
			errs = append(errs, fmt.Errorf("kv tier weights: unknown tier %q (want device, host, disk or shared)", name))
			continue
		}
		if seen.Has(t) {
			errs = append(errs, fmt.Errorf("kv tier weights: %s given twice", name))
			continue
		}
		seen |= 1 << t
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("kv tier weights: %s=%q is not a number in [0, 1]", name, val))
			continue
		}
		w[t] = f
	}
	return w, errors.Join(errs...)
}
