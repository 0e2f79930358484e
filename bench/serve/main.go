// Command serve measures DNS serving from cache, side by side in one run: nodelocaldns with the standard
// manifest's Corefile and its defaults, the same without the fast path (NODELOCALDNS_FASTPATH=off), the same
// binary as node-cache runs the engine (no fast path, no nodelocaldns tuning: Go's GC and scheduler defaults),
// unbound as a forwarding cache, and variants of the defaults with single knobs changed. All share one upstream (a kube-dns-like server with a long TTL, upstream.go),
// the same cache size and the same core: every server is pinned to CPU 0, dnsperf (the load generator) and the
// upstream to CPU 1. Runs
// alternate between servers so drift on a shared machine spreads evenly, and the table shows medians.
//
// Run it as root: `go run ./bench/serve` (make bench-serve installs unbound and dnsperf first).
// It re-executes itself in a throwaway network namespace, puts its addresses on that namespace's loopback and
// touches nothing else.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func main() { os.Exit(run()) }

// params are the bench's knobs; defaults keep the whole run near five minutes.
type params struct {
	runs     int
	duration time.Duration
	names    int
	soak     time.Duration
	variants bool
	verbose  bool
	only     map[string]bool // servers to run, by name; empty: all
	pgoEnv   []string        // the profiled instance's extra environment
	compare  string          // another nodelocaldns binary, run with the defaults as one more row
	skip     map[string]bool // workloads not to run: "mixed", "miss"
	pgoMiss  bool            // with -pgo: profile the miss workload instead of hits and mixed
	forward  bool            // also run the forward rows (forward.go)
	idle     time.Duration   // idle CPU window (idle.go); 0: skip
	idleRuns int
}

func run() int {
	if ip := os.Getenv(responderEnv); ip != "" {
		if err := serveResponder(ip); err != nil {
			fmt.Fprintf(os.Stderr, "bench/serve: minimal responder: %v\n", err)
			return 1
		}
		return 0
	}
	if code, reexeced := testenv.Reexec(); reexeced {
		return code
	}
	var p params
	flag.IntVar(&p.runs, "runs", 5, "runs of each workload per server, alternating (0: only the memory soak)")
	flag.DurationVar(&p.duration, "duration", 5*time.Second, "length of one run")
	flag.IntVar(&p.names, "names", 300, "names in the cache-hit set")
	flag.DurationVar(&p.soak, "soak", 20*time.Second, "memory soak: load beyond the cache size this long (10m for docs/performance.md's ten-minute soak; 0 = skip)")
	flag.BoolVar(&p.variants, "variants", false, "also run the defaults with single knobs changed (knobs.go)")
	flag.BoolVar(&p.verbose, "v", false, "copy the servers' logs to stderr")
	only := flag.String("only", "", "comma-separated server names to run (e.g. \"nodelocaldns,node-cache-like\" for the ten-minute soak); empty: all")
	pgoEnv := flag.String("pgo-env", "", "with -pgo: extra environment of the profiled instance, e.g. NODELOCALDNS_FASTPATH=off")
	flag.StringVar(&p.compare, "compare", "", "also run this nodelocaldns binary (e.g. one built from main) with the defaults, as the row \""+compareName+"\"")
	skip := flag.String("skip", "", "comma-separated workloads not to run: hit, mixed, miss")
	flag.BoolVar(&p.forward, "forward-rows", false, "also run the defaults with CoreDNS's forward instead of ours in the miss workload (forward.go)")
	flag.BoolVar(&p.pgoMiss, "pgo-miss", false, "with -pgo: profile the miss workload (every query a new name) instead of the cache-hit and mixed ones")
	flag.DurationVar(&p.idle, "idle", 60*time.Second, "idle CPU: one window with every server started and no query (0 = skip)")
	flag.IntVar(&p.idleRuns, "idle-runs", 3, "idle CPU: windows, the table shows medians")
	idleOnly := flag.Bool("idle-only", false, "measure only the idle CPU of nodelocaldns and node-cache-like (and -compare's binary): no workload, no soak")
	pgo := flag.String("pgo", "", "instead of the comparison, write a CPU profile of nodelocaldns under both workloads here (for cmd/nodelocaldns/default.pgo)")
	flag.Parse()
	p.only = map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			p.only[n] = true
		}
	}
	if *idleOnly {
		p.runs, p.soak = 0, 0
		p.only = map[string]bool{tunedName: true, untunedName: true, compareName: true}
	}
	p.skip = map[string]bool{}
	for _, n := range strings.Split(*skip, ",") {
		p.skip[strings.TrimSpace(n)] = true
	}
	if *pgoEnv != "" {
		p.pgoEnv = strings.Fields(*pgoEnv)
	}
	if !testenv.IsRoot() || !testenv.InThrowawayNetNS() {
		fmt.Fprintln(os.Stderr, "bench/serve: needs root, to run in a throwaway network namespace")
		return 2
	}
	if runtime.NumCPU() < 2 {
		fmt.Fprintln(os.Stderr, "bench/serve: needs two CPUs: one for the servers, one for the load generator")
		return 2
	}
	if *pgo != "" {
		if err := collectPGO(p, *pgo); err != nil {
			fmt.Fprintf(os.Stderr, "bench/serve: %v\n", err)
			return 1
		}
		return 0
	}
	if err := bench(p); err != nil {
		fmt.Fprintf(os.Stderr, "bench/serve: %v\n", err)
		return 1
	}
	return 0
}
