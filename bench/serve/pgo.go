package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pgoAddr is where the profiling instance's pprof plugin listens.
const pgoAddr = "127.0.0.1:6053"

// collectPGO writes a CPU profile of nodelocaldns serving both workloads to out: the profile that
// cmd/nodelocaldns/default.pgo holds and `go build` applies by default (profile-guided optimization). The
// instance runs the standard Corefile with one line added, `pprof`, in the cluster.local block.
func collectPGO(p params, out string) (err error) {
	defer recoverFatal(&err)
	work, err := os.MkdirTemp("", "bench-serve-pgo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin, err := buildBinary(work, "nodelocaldns-pgo", "off", "")
	if err != nil {
		return err
	}
	up, err := startLoadSide(p.names)
	if err != nil {
		return err
	}
	defer up.stop()
	v := variant{name: tunedName, env: p.pgoEnv, corefile: func(c string) string {
		return strings.Replace(c, "    errors\n", "    errors\n    pprof "+pgoAddr+"\n", 1)
	}}
	s, err := startNodeLocalDNS(bin, work, v, 0, io.Discard)
	if err != nil {
		return err
	}
	defer s.stop()
	hits := filepath.Join(work, "hits.txt")
	mixed := filepath.Join(work, "mixed.txt")
	if err := writeLines(hits, p.names, hitName); err != nil {
		return err
	}
	if err := writeLines(mixed, 2_000_000, mixedName("pgo", p.names)); err != nil {
		return err
	}
	data := []string{hits, mixed}
	if p.pgoMiss {
		data = nil
		for run := range 2 { // a file per run: the second must not find the first's names cached
			misses := filepath.Join(work, fmt.Sprintf("misses%d.txt", run))
			if err := writeLines(misses, 500_000, func(i int) string { return fmt.Sprintf("pgo%d-%d.%s", run, i, missZone) }); err != nil {
				return err
			}
			data = append(data, misses)
		}
	}
	prof := make(chan error, 1)
	d := 2 * p.duration
	go func() {
		prof <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pgoAddr, int(d.Seconds())), out)
	}()
	for _, data := range data {
		if _, err := load(work, s, data, p.duration, false, 0); err != nil {
			return err
		}
	}
	if err := <-prof; err != nil {
		return err
	}
	// What the load allocated, for finding where a query's garbage comes from (go tool pprof -sample_index=alloc_space).
	if err := fetch(fmt.Sprintf("http://%s/debug/pprof/allocs", pgoAddr), out+".allocs"); err != nil {
		return err
	}
	fmt.Printf("bench/serve: wrote the CPU profile of %v of load to %s, and the allocations since the start to %s.allocs\n", d, out, out)
	return nil
}

func fetch(url, out string) error {
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("fetch profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch profile: %s", resp.Status)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
