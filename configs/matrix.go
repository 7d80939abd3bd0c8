package configs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Matrix renders the resolved class matrix as human-readable text, for
// `dispatcher --check-config`: the buckets with their uncached-token ranges,
// the families × buckets -> class table (the default family marked with *),
// the explicit classes, and every class in DRR ring order with its quantum,
// queue policy, thresholds and limits ("-" where unset).
func (p *Policy) Matrix() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if p.DefaultFamily == "" {
		fmt.Fprintf(&b, "synthetic policy (no --policy-config): every request goes to class %q\n", p.Classes[0].Name)
	} else {
		fmt.Fprintf(&b, "default family: %s\n", p.DefaultFamily)
		b.WriteString("buckets (uncached tokens):\n")
		for i, bk := range p.Buckets {
			hi := "inf"
			if i+1 < len(p.Buckets) {
				hi = strconv.FormatUint(p.Buckets[i+1].MinTokens, 10)
			}
			fmt.Fprintf(tw, "  %s\t[%d, %s)\n", bk.Name, bk.MinTokens, hi)
		}
		tw.Flush()

		b.WriteString("families x buckets -> class (* default family):\n")
		tw.Write([]byte("  family"))
		for _, bk := range p.Buckets {
			fmt.Fprintf(tw, "\t%s", bk.Name)
		}
		tw.Write([]byte("\n"))
		for f, name := range p.families {
			if name == p.DefaultFamily {
				name += " *"
			}
			fmt.Fprintf(tw, "  %s", name)
			for _, ci := range p.matrix[f] {
				fmt.Fprintf(tw, "\t%s", p.Classes[ci].Name)
			}
			tw.Write([]byte("\n"))
		}
		tw.Flush()

		var explicit []string
		for _, c := range p.Classes {
			if c.Explicit() {
				explicit = append(explicit, c.Name)
			}
		}
		if len(explicit) == 0 {
			explicit = []string{"none"}
		}
		fmt.Fprintf(&b, "explicit classes (selected by name only): %s\n", strings.Join(explicit, ", "))
	}

	b.WriteString("classes in DRR ring order:\n")
	tw.Write([]byte("  #\tclass\tfamily\tbucket\tqueue\tquantum\tqueues\tbusy_threshold\tbusy_threshold_frac\tbusy_worker_ratio\trequests/worker\traw_isl_tokens/worker\tcached_tokens/worker\n"))
	for i, c := range p.Classes {
		queues := "no"
		if c.Queues() {
			queues = "yes"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			i, c.Name, dash(c.Family), dash(c.Bucket), c.Queue, c.Quantum, queues,
			uintOr(c.PrefillBusyThreshold), floatOr(c.PrefillBusyThresholdFrac), floatOr(c.BusyWorkerRatio),
			uintOr(c.RequestLimit), uintOr(c.RawISLLimit), uintOr(c.CachedLimit))
	}
	tw.Flush()

	b.WriteString("fairness keys per class (docs/config.md, key_weights):\n")
	tw.Write([]byte("  class\tdefault_key_weight\toutput_token_weight\tkey_weights\n"))
	for _, c := range p.Classes {
		names := make([]string, 0, len(c.KeyWeights))
		for k := range c.KeyWeights {
			names = append(names, k)
		}
		sort.Strings(names)
		weights := make([]string, len(names))
		for i, k := range names {
			weights[i] = k + "=" + strconv.FormatFloat(c.KeyWeights[k], 'g', -1, 64)
		}
		if len(weights) == 0 {
			weights = []string{"-"}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Name, strconv.FormatFloat(c.DefaultKeyWeight, 'g', -1, 64),
			strconv.FormatFloat(c.OutputTokenWeight, 'g', -1, 64), strings.Join(weights, ", "))
	}
	tw.Flush()
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func uintOr(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}

func floatOr(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}
