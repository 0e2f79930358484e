package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

const (
	soakNames = 40000            // distinct names, four times the manifest's `success 9984`, so the cache fills and evicts
	soakQPS   = 5000             // a busy node's rate; every query that is not cached goes to the upstream
	soakEvery = 10 * time.Second // at least; ten samples per server for longer soaks
)

// memory is what the soak measured of each server: its RSS high-water marks (KiB) and its CPU per 100k
// queries during the soak.
type memory struct {
	// run is the peak over the workloads before the soak, in one process: the hit and mixed workloads run at
	// the QPS each server reaches, so a faster server has more misses in flight at its peak.
	run map[string]int64
	// soak is the peak of a fresh process under the soak alone, the cache-filling load at the same rate for
	// every server: what the memory target bounds (targets.go).
	soak map[string]int64
	cpu  map[string]float64
}

// soak loads each server in turn with more distinct names than its cache holds and samples the cache's
// entry count and the RSS: once the cache is full both must stay flat. Each server is restarted first, so
// that its peak is the soak's and not the earlier workloads'.
func soak(work string, p params, servers []*server, logTo io.Writer) (memory, error) {
	m := memory{run: map[string]int64{}, soak: map[string]int64{}, cpu: map[string]float64{}}
	data := filepath.Join(work, "soak.txt")
	if err := writeLines(data, soakNames, func(i int) string { return fmt.Sprintf("soak%05d.%s", i, missZone) }); err != nil {
		return m, err
	}
	fmt.Printf("\nmemory soak: %d distinct names at %d qps for %v per server (cache: success 9984); -soak 10m for the long run\n",
		soakNames, soakQPS, p.soak)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tt s\tcache entries (success)\tRSS MiB\tanon MiB\tRSS peak MiB\t")
	for _, s := range servers {
		st, err := s.stat()
		if err != nil {
			return m, err
		}
		m.run[s.name] = st.hwm
		if err := s.restart(logTo); err != nil {
			return m, err
		}
		done := make(chan error, 1)
		go func() {
			r, err := load(work, s, data, p.soak, false, soakQPS)
			m.cpu[s.name] = r.cpuPer100k
			done <- err
		}()
		start := time.Now()
		tick := time.NewTicker(max(soakEvery, p.soak/10))
	sample:
		for {
			select {
			case err := <-done:
				tick.Stop()
				if err != nil {
					return m, err
				}
				break sample
			case <-tick.C:
				st, err := s.stat()
				if err != nil {
					return m, err
				}
				n, err := s.cacheEntries("success")
				if err != nil {
					return m, err
				}
				entries := "-"
				if n >= 0 {
					entries = fmt.Sprint(n)
				}
				fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t\n", s.name, time.Since(start).Seconds(), entries, mib(st.rss), mib(st.anon), mib(st.hwm))
			}
		}
		if st, err = s.stat(); err != nil {
			return m, err
		}
		m.soak[s.name] = st.hwm
		fmt.Fprintf(tw, "%s\tCPU s/100k %.3f\t\t\t\t\t\n", s.name, m.cpu[s.name])
	}
	return m, tw.Flush()
}
