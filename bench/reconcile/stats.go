package main

import (
	"math"
	"slices"
	"time"
)

// durations are one tamper's repair times.
type durations []time.Duration

// quantile is the nearest-rank q-th percentile (0 < q <= 100): the smallest sample with at least q% of the
// samples at or below it. 0 when there are none.
func (d durations) quantile(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := int(math.Ceil(q / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
