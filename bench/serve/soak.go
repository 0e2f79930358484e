package main

import (
	"fmt"
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

// soak loads each server in turn with more distinct names than its cache holds and samples the cache's
// entry count and the RSS: once the cache is full both must stay flat. It returns each server's peak RSS
// (KiB) after its soak, the high-water mark of its whole run, and its CPU per 100k queries during the soak.
func soak(work string, p params, servers []*server) (peaks map[string]int64, cpu map[string]float64, err error) {
	data := filepath.Join(work, "soak.txt")
	if err := writeLines(data, soakNames, func(i int) string { return fmt.Sprintf("soak%05d.%s", i, missZone) }); err != nil {
		return nil, nil, err
	}
	peaks, cpu = map[string]int64{}, map[string]float64{}
	fmt.Printf("\nmemory soak: %d distinct names at %d qps for %v per server (cache: success 9984); -soak 10m for the long run\n",
		soakNames, soakQPS, p.soak)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tt s\tcache entries (success)\tRSS MiB\tanon MiB\tRSS peak MiB\t")
	for _, s := range servers {
		done := make(chan error, 1)
		go func() {
			r, err := load(work, s, data, p.soak, false, soakQPS)
			cpu[s.name] = r.cpuPer100k
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
					return nil, nil, err
				}
				break sample
			case <-tick.C:
				st, err := s.stat()
				if err != nil {
					return nil, nil, err
				}
				n, err := s.cacheEntries("success")
				if err != nil {
					return nil, nil, err
				}
				entries := "-"
				if n >= 0 {
					entries = fmt.Sprint(n)
				}
				fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t\n", s.name, time.Since(start).Seconds(), entries, mib(st.rss), mib(st.anon), mib(st.hwm))
			}
		}
		st, err := s.stat()
		if err != nil {
			return nil, nil, err
		}
		peaks[s.name] = st.hwm
		fmt.Fprintf(tw, "%s\tCPU s/100k %.3f\t\t\t\t\t\n", s.name, cpu[s.name])
	}
	return peaks, cpu, tw.Flush()
}
