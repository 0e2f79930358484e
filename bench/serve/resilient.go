package main

import "strings"

// The resilient workload: the same cache hits, with the configuration users run for resilience: the standard
// Corefile with `prefetch` and `serve_stale … prefer_positive` (CoreDNS 1.15's plugin/cache README) in every
// block's cache, and unbound with the same two features (prefetch, serve-expired). Every row of it runs in the
// same rounds as the standard rows, so its ratios are paired the same way.

const (
	resilientSuffix = " resilient"
	// resilientCache is what every cache block gets: prefetch items asked for 10 times a minute when 10% of
	// their TTL is left, and serve expired items for up to an hour, preferring a positive stale answer to a
	// fresh negative one.
	resilientCache = "        prefetch 10 1m 10%\n        serve_stale 1h\n        serve_stale_policy prefer_positive\n"
)

// resilientCorefile adds resilientCache to every cache block of the standard Corefile, the one-line `cache 30`
// ones included.
func resilientCorefile(base string) string {
	var b strings.Builder
	for line := range strings.SplitAfterSeq(base, "\n") {
		switch strings.TrimSpace(line) {
		case "cache {":
			b.WriteString(line + resilientCache)
		case "cache 30":
			b.WriteString("    cache 30 {\n" + resilientCache + "    }\n")
		default:
			b.WriteString(line)
		}
	}
	return b.String()
}

// resilientVariants are the standard rows (fast path on, off, node-cache-like) on the resilient Corefile, in the
// cache-hit and the miss workload.
func resilientVariants(std []variant) []variant {
	var out []variant
	for _, v := range std {
		v.name += resilientSuffix
		v.corefile = resilientCorefile
		v.resilient = true
		v.mixed = false // the miss workload runs them: a miss with prefetch and serve_stale configured
		v.hint += "; Corefile with prefetch and serve_stale prefer_positive in every block"
		out = append(out, v)
	}
	return out
}

// unboundResilient is what unbound's configuration gets for the resilient rows.
const unboundResilient = "  prefetch: yes\n  serve-expired: yes\n"
