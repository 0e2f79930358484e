package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// The serving targets: what nodelocaldns must reach against unbound (a cache without CoreDNS's plugin chain)
// and node-cache-like (the agent it replaces), each a ratio measured in this run: paired per round (the median of per-round
// ratios) where the workload has rounds, and the memory soak's peak RSS, each server a fresh process.
type target struct {
	what    string
	table   int    // index into workloads' tables
	row, vs string // server names: row's value over vs's
	metric  string
	f       func(result) float64
	atMost  float64
	beside  string // a server whose ratio is printed beside, for reference (unbound's for the misses)
}

var (
	cpuPerQuery = func(x result) float64 { return x.cpuPer100k }
	p99         = func(x result) float64 { return float64(x.p99) / float64(time.Millisecond) }
)

var targets = []target{
	{what: "cache hits, standard Corefile", table: 0, row: tunedName, vs: unboundName, metric: "CPU/query", f: cpuPerQuery, atMost: 0.8},
	{what: "cache hits, resilient Corefile", table: 1, row: tunedName + resilientSuffix, vs: unboundName + resilientSuffix, metric: "CPU/query", f: cpuPerQuery, atMost: 0.8},
	{what: "mixed", table: 2, row: tunedName, vs: untunedName, metric: "CPU/query", f: cpuPerQuery, atMost: 0.5},
	{what: "misses, standard Corefile", table: 3, row: tunedName, vs: untunedName, metric: "CPU/query", f: cpuPerQuery, atMost: 0.8, beside: unboundName},
	{what: "misses, resilient Corefile", table: 4, row: tunedName + resilientSuffix, vs: untunedName + resilientSuffix, metric: "CPU/query", f: cpuPerQuery, atMost: 0.8, beside: unboundName + resilientSuffix},
	{what: "cache hits, standard Corefile", table: 0, row: tunedName, vs: untunedName, metric: "p99", f: p99, atMost: 1.0},
	{what: "cache hits, standard Corefile", table: 0, row: tunedName, vs: unboundName, metric: "p99", f: p99, atMost: 1.0},
	{what: "cache hits, resilient Corefile", table: 1, row: tunedName + resilientSuffix, vs: untunedName + resilientSuffix, metric: "p99", f: p99, atMost: 1.0},
	{what: "mixed", table: 2, row: tunedName, vs: untunedName, metric: "p99", f: p99, atMost: 1.0},
	{what: "misses, standard Corefile", table: 3, row: tunedName, vs: untunedName, metric: "p99", f: p99, atMost: 1.0},
	{what: "misses, resilient Corefile", table: 4, row: tunedName + resilientSuffix, vs: untunedName + resilientSuffix, metric: "p99", f: p99, atMost: 1.0},
}

// printTargets prints every target as a ratio with its bound, and whether this run meets it.
func printTargets(w io.Writer, tables []table, mem memory) {
	fmt.Fprintf(w, "\nserving targets, ratios of medians of per-round ratios\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tmetric\tratio\tat most\tmet\tbeside\t")
	for _, t := range targets {
		if t.table >= len(tables) {
			continue
		}
		rows := map[string]row{}
		for _, r := range tables[t.table].rows {
			rows[r.s.name] = r
		}
		a, okA := rows[t.row]
		b, okB := rows[t.vs]
		if !okA || !okB {
			continue
		}
		v, ok := pairedRatio(a, b, t.f)
		if !ok {
			continue
		}
		beside := ""
		if c, ok := rows[t.beside]; ok {
			if r, ok := pairedRatio(a, c, t.f); ok {
				beside = fmt.Sprintf("%s / %s %.2f", t.row, t.beside, r)
			}
		}
		fmt.Fprintf(tw, "%s\t%s, %s / %s\t%.2f\t%.2f\t%s\t%s\t\n", t.what, t.metric, t.row, t.vs, v, t.atMost, met(v <= t.atMost), beside)
	}
	if a, b := mem.soak[tunedName], mem.soak[untunedName]; a > 0 && b > 0 {
		v := float64(a) / float64(b)
		fmt.Fprintf(tw, "memory soak (cache-filling load, fresh process)\tpeak RSS, %s / %s (%s / %s MiB)\t%.2f\t%.2f\t%s\t\t\n",
			tunedName, untunedName, mib(a), mib(b), v, 1.0, met(v <= 1.0))
	}
	if a, b := mem.run[tunedName], mem.run[untunedName]; a > 0 && b > 0 {
		// Not a target: each server ran these at its own QPS (see memory.run).
		fmt.Fprintf(tw, "the workloads before the soak, one process\tpeak RSS, %s / %s (%s / %s MiB)\t%.2f\t-\t-\t\t\n",
			tunedName, untunedName, mib(a), mib(b), float64(a)/float64(b))
	}
	if a, b := mem.cpu[tunedName], mem.cpu[untunedName]; a > 0 && b > 0 {
		fmt.Fprintf(tw, "memory soak (mostly misses, the cache evicting)\tCPU/query, %s / %s (one run each)\t%.2f\t%.2f\t%s\t\t\n",
			tunedName, untunedName, a/b, 1.0, met(a/b <= 1.0))
	}
	tw.Flush()
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
