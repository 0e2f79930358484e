package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Addresses and names, all inside the throwaway namespace: the servers listen on loopback aliases (no interface
// or nftables setup, the same for every server, so no server pays for conntrack and none is spared it), the
// upstream on its own address, and every name lives under the cluster domain that the standard Corefile forwards
// to __PILLAR__CLUSTER__DNS__.
const (
	upstreamIP   = "10.0.0.2"
	domain       = "cluster.local"
	hitZone      = "svc." + domain // hit names: s<i>.ns<j>.svc.cluster.local, in the upstream's hosts file
	missZone     = "miss." + domain
	serverCPU    = "0" // every server, one at a time under load
	loadCPU      = "1" // dnsperf and the upstream
	upstreamTTL  = 3600
	nxNames      = 100 // distinct NXDOMAIN names in the mixed workload
	toolsMissing = "run `scripts/deps.sh bench` as root (Debian packages unbound dnsperf; taskset is util-linux)"
)

// tb adapts the harness's testing.TB needs (building the binary) to a program: failures become panics that
// bench recovers into an error.
type tb struct{ testing.TB }

type fatal struct{ msg string }

func (tb) Helper()                         {}
func (tb) Fatal(args ...any)               { panic(fatal{fmt.Sprint(args...)}) }
func (tb) Fatalf(format string, a ...any)  { panic(fatal{fmt.Sprintf(format, a...)}) }
func (tb) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func checkTools() error {
	for _, t := range []string{"unbound", "dnsperf", "taskset", "ip"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s not found: %s", t, toolsMissing)
		}
	}
	return nil
}

func sh(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func hitName(i int) string { return fmt.Sprintf("s%04d.ns%d.%s", i, i%7, hitZone) }

// writeLines writes a dnsperf data file: one "name A" per line.
func writeLines(path string, n int, name func(i int) string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		fmt.Fprintf(w, "%s A\n", name(i))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mixedName is the i-th query of the mixed workload: per 100 queries 5 NXDOMAIN (a small set of names, as a
// pod's search path produces), 10 misses (unique names, tagged per run so no run finds another's in a cache)
// and 85 hits.
func mixedName(tag string, hits int) func(i int) string {
	return func(i int) string {
		switch r := i % 100; {
		case r < 5:
			return fmt.Sprintf("nx%03d.ns0.%s", (i/100)%nxNames, hitZone)
		case r < 15:
			return fmt.Sprintf("%s-%d.%s", tag, i, missZone)
		default:
			return hitName(i % hits)
		}
	}
}
