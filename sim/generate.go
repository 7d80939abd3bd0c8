package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Mix is one class token of a generated workload and its part of the arrivals.
type Mix struct {
	Token  string
	Weight float64 // > 0; parts are relative
}

// Workload describes a generated workload (fairctl sim --generate).
type Workload struct {
	// Kind is "poisson" (exponential gaps at Rate) or "bursty" (every
	// BurstPeriod, Rate × BurstPeriod requests at one instant: the same mean
	// rate, all at once).
	Kind        string
	Rate        float64 // requests per second, > 0
	Duration    time.Duration
	BurstPeriod time.Duration // bursty only; default 1s
	Mix         []Mix
	// ISL is the input tokens of every request; with ISLMax > ISL, each
	// request's is uniform in [ISL, ISLMax].
	ISL, ISLMax uint64
	// Keys is the number of fairness keys per class (0: none, key "_");
	// a request's key is k1..kN with Zipf exponent Zipf (P(k_i) ∝ 1/i^Zipf;
	// 0: uniform).
	Keys int
	Zipf float64
	Seed uint64
	// Start is the virtual time of the first instant, Unix ns.
	Start int64
}

// Generate returns the workload's arrivals in time order; the same workload
// and seed give the same arrivals.
func Generate(w Workload) ([]Arrival, error) {
	if w.Kind != "poisson" && w.Kind != "bursty" {
		return nil, fmt.Errorf("sim: workload %q: want poisson or bursty", w.Kind)
	}
	switch {
	case !(w.Rate > 0) || math.IsInf(w.Rate, 0):
		return nil, fmt.Errorf("sim: workload: rate %v: want a finite number > 0", w.Rate)
	case w.Duration <= 0:
		return nil, fmt.Errorf("sim: workload: duration %v: want > 0", w.Duration)
	case len(w.Mix) == 0:
		return nil, fmt.Errorf("sim: workload: no class in the mix")
	case w.ISL == 0:
		return nil, fmt.Errorf("sim: workload: isl 0: want > 0")
	case w.Keys < 0:
		return nil, fmt.Errorf("sim: workload: keys %d: want >= 0", w.Keys)
	case !(w.Zipf >= 0) || math.IsInf(w.Zipf, 0):
		return nil, fmt.Errorf("sim: workload: zipf %v: want a finite number >= 0", w.Zipf)
	}
	for _, m := range w.Mix {
		if !(m.Weight > 0) || m.Token == "" {
			return nil, fmt.Errorf("sim: workload: class %q: want a token and a weight > 0", m.Token)
		}
	}
	if w.BurstPeriod <= 0 {
		w.BurstPeriod = time.Second
	}
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed+1))
	mixCDF := cdf(len(w.Mix), func(i int) float64 { return w.Mix[i].Weight })
	var keyCDF []float64
	if w.Keys > 0 {
		keyCDF = cdf(w.Keys, func(i int) float64 { return 1 / math.Pow(float64(i+1), w.Zipf) })
	}
	var out []Arrival
	add := func(t int64) {
		m := w.Mix[pick(mixCDF, rng.Float64())]
		isl := w.ISL
		if w.ISLMax > w.ISL {
			isl += rng.Uint64N(w.ISLMax - w.ISL + 1)
		}
		key := "_"
		if keyCDF != nil {
			key = fmt.Sprintf("k%d", pick(keyCDF, rng.Float64())+1)
		}
		out = append(out, Arrival{T: t, ID: fmt.Sprintf("g%d", len(out)+1), Token: m.Token, Key: key, Published: t, ISL: isl})
	}
	end := w.Start + int64(w.Duration)
	switch w.Kind {
	case "poisson":
		for t := w.Start + int64(rng.ExpFloat64()/w.Rate*1e9); t < end; t += int64(rng.ExpFloat64() / w.Rate * 1e9) {
			add(t)
		}
	case "bursty":
		per := w.Rate * w.BurstPeriod.Seconds()
		carry := 0.0
		for t := w.Start; t < end; t += int64(w.BurstPeriod) {
			carry += per
			for ; carry >= 1; carry-- {
				add(t)
			}
		}
	}
	return out, nil
}

// cdf returns the normalised cumulative weights of n items.
func cdf(n int, weight func(int) float64) []float64 {
	c := make([]float64, n)
	s := 0.0
	for i := range n {
		s += max(0, weight(i))
		c[i] = s
	}
	for i := range c {
		c[i] /= s
	}
	return c
}

// pick returns the index whose cumulative weight first reaches u.
func pick(c []float64, u float64) int {
	i, _ := slices.BinarySearch(c, u)
	return min(i, len(c)-1)
}
