package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one server's runs of one workload.
type row struct {
	s    *server
	hint string
	runs []result
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func pick[T any](rs []result, f func(result) T) []T {
	out := make([]T, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

func mib(kb int64) string { return fmt.Sprintf("%.1f", float64(kb)/1024) }

// printTable prints one workload: medians per server, and ratios against the untuned engine and unbound. The
// "paired" ratios are the medians of per-round ratios: runs of one round are back to back, so a slow stretch
// of the machine weighs on both sides of each ratio instead of on whichever server it fell on.
func printTable(w io.Writer, title string, rows []row, untuned, unbound string) {
	qps := map[string]float64{}
	byName := map[string]row{}
	for _, r := range rows {
		qps[r.s.name] = median(pick(r.runs, func(x result) float64 { return x.qps }))
		byName[r.s.name] = r
	}
	fmt.Fprintf(w, "\n%s (medians of %d runs)\n", title, len(rows[0].runs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tQPS\tx untuned\tpaired\tCPU paired\tx unbound\tavg ms\tp50 ms\tp99 ms\tmax ms\tCPU s/100k\tuser\tsys\tdgrams/recv\tRSS idle MiB\tanon idle\tRSS peak MiB\tanon after\tlost\t")
	for _, r := range rows {
		q := qps[r.s.name]
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.s.name, q,
			ratio(q, qps[untuned]),
			paired(r, byName[untuned], func(x result) float64 { return x.qps }),
			paired(r, byName[untuned], func(x result) float64 { return x.cpuPer100k }),
			ratio(q, qps[unbound]),
			ms(median(pick(r.runs, func(x result) time.Duration { return x.avg }))),
			ms(median(pick(r.runs, func(x result) time.Duration { return x.p50 }))),
			ms(median(pick(r.runs, func(x result) time.Duration { return x.p99 }))),
			ms(median(pick(r.runs, func(x result) time.Duration { return x.max }))),
			median(pick(r.runs, func(x result) float64 { return x.cpuPer100k })),
			median(pick(r.runs, func(x result) float64 { return x.userPer100k })),
			median(pick(r.runs, func(x result) float64 { return x.sysPer100k })),
			perReceive(r.runs), mib(r.s.idle.rss), mib(r.s.idle.anon), mib(slices.Max(pick(r.runs, func(x result) int64 { return x.hwm }))),
			mib(slices.Max(pick(r.runs, func(x result) int64 { return x.anon }))),
			slices.Max(pick(r.runs, func(x result) int64 { return x.lost })))
	}
	tw.Flush()
	var legend []string
	for _, r := range rows {
		if r.hint != "" {
			legend = append(legend, fmt.Sprintf("  %s: %s", r.s.name, r.hint))
		}
	}
	if len(legend) > 0 {
		fmt.Fprintln(w, strings.Join(legend, "\n"))
	}
}

// paired is the median over rounds of r's value divided by base's in the same round, formatted.
func paired(r, base row, f func(result) float64) string {
	v, ok := pairedRatio(r, base, f)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// pairedRatio is the median over rounds of r's value divided by base's in the same round.
func pairedRatio(r, base row, f func(result) float64) (float64, bool) {
	var rs []float64
	for i := range min(len(r.runs), len(base.runs)) {
		if b := f(base.runs[i]); b != 0 {
			rs = append(rs, f(r.runs[i])/b)
		}
	}
	if len(rs) == 0 {
		return 0, false
	}
	return median(rs), true
}

// perReceive is the median batch size of the fast path's receive calls, "-" without a fast path.
func perReceive(rs []result) string {
	v := median(pick(rs, func(x result) float64 { return x.perReceive }))
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// printRuns prints every run's QPS, p99 and CPU per query, so the spread behind a median is visible, and each
// server's CPU per query over unbound's, paired by round (the figure to read on a machine shared with others).
func printRuns(w io.Writer, rows []row, unbound string) {
	var ub row
	for _, r := range rows {
		if r.s.name == unbound {
			ub = r
		}
	}
	for _, r := range rows {
		qs := pick(r.runs, func(x result) string { return fmt.Sprintf("%.0f", x.qps) })
		ps := pick(r.runs, func(x result) string { return ms(x.p99) })
		cs := pick(r.runs, func(x result) string { return fmt.Sprintf("%.3f", x.cpuPer100k) })
		fmt.Fprintf(w, "  %-22s QPS %s  p99 ms %s  CPU s/100k %s  CPU x unbound paired %s\n", r.s.name, strings.Join(qs, " "),
			strings.Join(ps, " "), strings.Join(cs, " "), paired(r, ub, func(x result) float64 { return x.cpuPer100k }))
	}
}
