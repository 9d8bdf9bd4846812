package stats

import "slices"

// Spread summarises one figure over repeated runs.
type Spread struct {
	N                int
	Median, Min, Max float64
}

// SummarizeRepeats returns the median (as Median: the mean of the two middle
// values for an even count), minimum and maximum of xs. xs is not modified.
func SummarizeRepeats(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Spread{N: len(s), Median: Median(s), Min: s[0], Max: s[len(s)-1]}
}
