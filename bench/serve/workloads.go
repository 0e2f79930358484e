package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// table is one workload's rows as printed, with the rows its ratios are against.
type table struct {
	title            string
	rows             []row
	untuned, unbound string
}

// workloads runs every workload p.runs times, in rounds: each round runs every server of the workload once,
// the first one rotating, so that drift on a shared machine spreads evenly and per-round ratios pair runs
// that were back to back. The cache-hit workload runs the standard and the resilient rows (and both unbounds)
// in the same rounds; the mixed and the miss workload the rows marked for them (the miss workload the
// standard and the resilient rows together, in the same rounds).
func workloads(work string, p params, servers []*server, hints map[string]string, hits string, warm func(*server) error) ([]table, error) {
	runsOf := func(what string) int {
		if p.skip[what] {
			return 0
		}
		return p.runs
	}
	hitRows, err := rounds("hit", servers, runsOf("hit"), hints, func(_ int, s *server) (result, error) {
		if err := warm(s); err != nil {
			return result{}, err
		}
		return load(work, s, hits, p.duration, false, 0)
	})
	if err != nil {
		return nil, err
	}

	// The mixed and the miss workload go once through a file long enough for the fastest server's run; their
	// misses are unique per run.
	var peak float64
	for _, r := range hitRows {
		peak = max(peak, median(pick(r.runs, func(x result) float64 { return x.qps })))
	}
	if peak == 0 { // the cache-hit workload skipped: enough for any server here
		peak = 150_000
	}
	lines := int(peak*p.duration.Seconds()*1.3) + 1000
	mixed := slices.DeleteFunc(slices.Clone(servers), func(s *server) bool { return !s.mixed })
	miss := slices.DeleteFunc(slices.Clone(servers), func(s *server) bool { return !s.miss })
	data := filepath.Join(work, "data.txt")
	mixRows, err := rounds("mixed", mixed, runsOf("mixed"), hints, func(run int, s *server) (result, error) {
		if err := writeLines(data, lines, mixedName(fmt.Sprintf("r%d%s", run, s.ip), p.names)); err != nil {
			return result{}, err
		}
		if err := warm(s); err != nil {
			return result{}, err
		}
		return load(work, s, data, p.duration, true, 0)
	})
	if err != nil {
		return nil, err
	}
	missRows, err := rounds("miss", miss, runsOf("miss"), hints, func(run int, s *server) (result, error) {
		tag := fmt.Sprintf("m%d%s", run, s.ip)
		if err := writeLines(data, lines, func(i int) string { return fmt.Sprintf("%s-%d.%s", tag, i, missZone) }); err != nil {
			return result{}, err
		}
		return load(work, s, data, p.duration, true, 0)
	})
	if err != nil {
		return nil, err
	}

	std := slices.DeleteFunc(slices.Clone(servers), func(s *server) bool { return s.resilient })
	res := slices.DeleteFunc(slices.Clone(servers), func(s *server) bool { return !s.resilient })
	tables := []table{
		{"cache-hit workload", ordered(hitRows, std), untunedName, unboundName},
		{"cache-hit workload, resilient Corefile (prefetch, serve_stale prefer_positive)", ordered(hitRows, res),
			untunedName + resilientSuffix, unboundName + resilientSuffix},
		{"mixed workload: 85% hits, 10% misses (unique names), 5% NXDOMAIN", ordered(mixRows, mixed), untunedName, unboundName},
		{"miss workload: every query a new name, forwarded (over TCP, force_tcp)", ordered(missRows, std), untunedName, unboundName},
		{"miss workload, resilient Corefile", ordered(missRows, res), untunedName + resilientSuffix, unboundName + resilientSuffix},
	}
	for _, t := range tables {
		if len(t.rows) == 0 || len(t.rows[0].runs) == 0 {
			continue
		}
		printTable(os.Stdout, t.title, t.rows, t.untuned, t.unbound)
		printRuns(os.Stdout, t.rows, t.unbound)
	}
	return tables, nil
}

// rounds runs one workload: runs rounds over servers, f measuring one server in one round.
func rounds(what string, servers []*server, runs int, hints map[string]string, f func(run int, s *server) (result, error)) (map[string]*row, error) {
	rows := newRows(servers, hints)
	for run := range runs {
		for i := range servers {
			s := servers[(i+run)%len(servers)] // rotate who goes first
			r, err := f(run, s)
			if err != nil {
				return nil, err
			}
			rows[s.name].runs = append(rows[s.name].runs, r)
			fmt.Fprintf(os.Stderr, "%-6s run %d %-26s %8.0f qps p99 %s ms\n", what, run+1, s.name, r.qps, ms(r.p99))
		}
	}
	return rows, nil
}
