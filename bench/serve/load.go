package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one dnsperf run against one server.
type result struct {
	qps            float64
	completed      int64
	lost           int64
	avg, p50, p99  time.Duration
	max            time.Duration
	cpuPer100k     float64 // server CPU seconds per 100,000 answered queries: user and system time
	userPer100k    float64 // of which in user space
	sysPer100k     float64 // of which in the kernel
	rcodes         map[string]int64
	hwm            int64 // server's RSS high-water mark after the run, KiB
	anon           int64 // server's anonymous RSS right after the run, KiB
	cacheEntries   int64
	elapsedSeconds float64
	perReceive     float64 // datagrams per receive call of the fast path's readers; 0 without a fast path
}

// load runs dnsperf pinned to loadCPU against s with the queries in data, for at most d (and at most once
// through the file when once is set). -v gives every query's latency, from which the percentiles come;
// dnsperf's own line gives QPS. The server's CPU time is read from /proc before and after.
func load(work string, s *server, data string, d time.Duration, once bool, qpsLimit int) (result, error) {
	var r result
	out := filepath.Join(work, "dnsperf.out")
	args := []string{"-c", loadCPU, "dnsperf", "-s", s.ip, "-d", data, "-l", strconv.Itoa(int(d.Seconds())),
		"-q", strconv.Itoa(outstanding(qpsLimit)), "-t", "2", "-v"}
	if once {
		args = append(args, "-n", "1")
	}
	if qpsLimit > 0 {
		args = append(args, "-Q", strconv.Itoa(qpsLimit))
	}
	f, err := os.Create(out)
	if err != nil {
		return r, err
	}
	defer f.Close()
	before, err := s.stat()
	if err != nil {
		return r, err
	}
	calls0, got0 := s.receives()
	cmd := exec.Command("taskset", args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("dnsperf against %s: %v: %s", s.name, err, stderr.String())
	}
	after, err := s.stat()
	if err != nil {
		return r, err
	}
	r.hwm, r.anon = after.hwm, after.anon
	if calls, got := s.receives(); calls > calls0 {
		r.perReceive = (got - got0) / (calls - calls0)
	}
	if err := parseDnsperf(out, &r); err != nil {
		return r, fmt.Errorf("dnsperf against %s: %w", s.name, err)
	}
	if r.completed > 0 {
		per100k := func(ticks int64) float64 { return float64(ticks) / 100 / float64(r.completed) * 1e5 }
		r.userPer100k, r.sysPer100k = per100k(after.user-before.user), per100k(after.sys-before.sys)
		r.cpuPer100k = r.userPer100k + r.sysPer100k
	}
	return r, nil
}

// outstanding is dnsperf's -q: 100 queries in flight to saturate a server, fewer for a paced run (warm-up, soak).
func outstanding(qpsLimit int) int {
	if qpsLimit > 0 {
		return 10
	}
	return 100
}

func parseDnsperf(path string, r *result) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r.rcodes = map[string]int64{}
	lat := make([]time.Duration, 0, 1<<20)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "> "); ok {
			// "> NOERROR name A 0.000123"; lost queries print "> T" lines without a latency.
			fs := strings.Fields(rest)
			if len(fs) < 4 {
				continue
			}
			r.rcodes[fs[0]]++
			if sec, err := strconv.ParseFloat(fs[len(fs)-1], 64); err == nil {
				lat = append(lat, time.Duration(sec*1e9))
			}
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		num := func() float64 { x, _ := strconv.ParseFloat(strings.Fields(v + " 0")[0], 64); return x }
		switch k {
		case "Queries per second":
			r.qps = num()
		case "Queries completed":
			r.completed = int64(num())
		case "Queries lost":
			r.lost = int64(num())
		case "Run time (s)":
			r.elapsedSeconds = num()
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if r.qps == 0 || len(lat) == 0 {
		b, _ := os.ReadFile(path)
		return fmt.Errorf("no statistics in dnsperf's output:\n%s", b[max(0, len(b)-2000):])
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	r.avg = sum / time.Duration(len(lat))
	r.p50, r.p99, r.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	return nil
}
