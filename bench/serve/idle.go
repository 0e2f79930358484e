package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// idleCPU measures what each server costs when nothing happens (issue 39: an agent that reconciles on events
// should cost nothing while none come; at most node-cache-like's in the same run): all started, no query
// after start-up's probe, each window the same for all of them. CPU is /proc/<pid>/stat's utime+stime, in
// ticks of 10 ms, so a 60 s window reads in steps of 10 ms a minute.
func idleCPU(w io.Writer, servers []*server, window time.Duration, runs int) error {
	msPerMin := map[string][]float64{}
	for r := range runs {
		before := make([]procStat, len(servers))
		for i, s := range servers {
			st, err := s.stat()
			if err != nil {
				return fmt.Errorf("idle run %d: %s: %w", r+1, s.name, err)
			}
			before[i] = st
		}
		time.Sleep(window)
		for i, s := range servers {
			st, err := s.stat()
			if err != nil {
				return fmt.Errorf("idle run %d: %s: %w", r+1, s.name, err)
			}
			ticks := st.user + st.sys - before[i].user - before[i].sys
			msPerMin[s.name] = append(msPerMin[s.name], float64(ticks*10)*float64(time.Minute)/float64(window))
		}
	}
	fmt.Fprintf(w, "\nidle CPU: every server started, no query, %d windows of %v, all servers in each (ms of CPU a minute)\n", runs, window)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "server\tmedian ms/min\truns\tx %s\t\n", untunedName)
	base := median(msPerMin[untunedName])
	for _, s := range servers {
		m := median(msPerMin[s.name])
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", m/base)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%v\t%s\t\n", s.name, m, msPerMin[s.name], ratio)
	}
	tw.Flush()
	if a, b := median(msPerMin[tunedName]), base; len(msPerMin[tunedName]) > 0 && len(msPerMin[untunedName]) > 0 {
		fmt.Fprintf(w, "target: %s's idle CPU at most %s's: %.0f vs %.0f ms/min, met: %s\n", tunedName, untunedName, a, b, met(a <= b))
	}
	return nil
}
