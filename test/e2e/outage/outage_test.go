// Package outage tests the agent through an outage of kube-dns-upstream under load: the real binary, a real
// upstream that stops answering, and a flood of misses from a Go DNS client.
//
// Conventions: the agent listens on 127.0.0.10 (-setupinterface=false -setupiptables=false, as in test/e2e/serve);
// kube-dns-upstream is an Upstream on 127.0.0.53 answering 10.0.0.53. The outage is a drop of everything towards
// 127.0.0.53 in this namespace's output hook, as when kube-dns's node goes dark: connections are neither refused
// nor answered, so every miss waits for the forward plugin's timeout unless something bounds it.
package outage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

const (
	listen   = "127.0.0.10:53"
	upstream = "127.0.0.53"
	// floodRate and floodFor are the flood (10k unique misses a second), kept short for make test.
	floodRate = 10000
	floodFor  = 4 * time.Second
	// stubTimeout is glibc's resolver timeout (resolv.conf's default `timeout:5`).
	stubTimeout = 5 * time.Second
)

// deadUpstream drops everything towards the upstream's address until the test ends.
func deadUpstream(t *testing.T) {
	testenv.NftApply(t, fmt.Sprintf(`table inet outage {
	chain output {
		type filter hook output priority 0; policy accept;
		ip daddr %s drop
	}
}
`, upstream))
	t.Cleanup(func() { testenv.NftApply(t, "delete table inet outage\n") })
}

// TestUpstreamOutageFlood floods the agent with misses towards a dead upstream, with the fast path on and off: its
// peak RSS stays within twice its idle RSS, misses are answered (shed, not queued), and names cached before the
// outage keep being answered throughout; with serve_stale, names whose entries expired before the outage too.
func TestUpstreamOutageFlood(t *testing.T) {
	testenv.RequireRoot(t)
	for _, fastpath := range []string{"on", "off"} {
		t.Run("fastpath="+fastpath, func(t *testing.T) { outageFlood(t, fastpath, false) })
	}
	t.Run("serve_stale", func(t *testing.T) { outageFlood(t, "off", true) })
}

func outageFlood(t *testing.T, fastpath string, stale bool) {
	base := harness.StandardCorefile("127.0.0.10", "", "cluster.local")
	if stale {
		// Entries live a second, then are served stale: the cached names below are all expired by the outage.
		base = strings.Replace(base, "success 9984 30", "success 9984 1\n                serve_stale", 1)
		if !strings.Contains(base, "serve_stale") {
			t.Fatal("the standard Corefile has no success 9984 30 to make stale")
		}
	}
	up := harness.StartUpstream(t, upstream+":53", "10.0.0.53")
	dir := t.TempDir()
	vol := harness.NewConfigMapVolume(t, filepath.Join(dir, "kube-dns"), nil)
	a := harness.Start(t, harness.Config{
		Dir:          dir,
		BaseCorefile: base,
		Args: []string{"-localip", "127.0.0.10", "-setupinterface=false", "-setupiptables=false",
			"-upstreamsvc", "kube-dns-upstream", "-kubednscm", vol.Dir},
		Env: []string{"KUBE_DNS_UPSTREAM_SERVICE_HOST=" + upstream, "NODELOCALDNS_FASTPATH=" + fastpath},
	})
	a.WaitReady()

	// Names answered before the outage, and so in the cache (the upstream's TTL is 300 s, the cache's cap 30 s).
	var cached []string
	for i := range 20 {
		name := fmt.Sprintf("cached%d.default.svc.cluster.local", i)
		for range 3 { // the fast path learns an answer once CoreDNS's cache has it
			if got, err := harness.Lookup(listen, "udp", name, 2*time.Second); err != nil || got != "10.0.0.53" {
				t.Fatalf("warm-up lookup %s: %q, %v", name, got, err)
			}
		}
		cached = append(cached, name)
	}
	if up.QueriesFor(cached[0]) != 1 {
		t.Fatalf("upstream saw %d queries for %s, want 1 (the rest from cache)", up.QueriesFor(cached[0]), cached[0])
	}
	settle := time.Second // let start-up garbage settle
	if stale {
		settle = 2 * time.Second // and every entry expire
	}
	time.Sleep(settle)
	idle := procKiB(t, a.Cmd.Process.Pid, "VmRSS")

	deadUpstream(t)
	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var f flood
	floodErr := make(chan error, 1)
	go func() { floodErr <- f.run(ctx, listen, "svc.cluster.local.", floodRate) }()

	// Cache hits throughout, one every 50 ms, each asked as a pod's stub resolver asks (glibc's defaults: a 5 s
	// timeout, two attempts): a datagram the kernel drops from the socket's full receive queue under the flood is
	// lost before the agent sees it, answered or not, and a starved machine answers late, not never. A cache that
	// queued hits behind the misses fails every lookup after the first few, not one.
	var hits, missed, retried int
	var failures []string
	for i := 0; ctx.Err() == nil; i++ {
		name := cached[i%len(cached)]
		got, err := harness.Lookup(listen, "udp", name, stubTimeout)
		if err != nil {
			retried++
			got, err = harness.Lookup(listen, "udp", name, stubTimeout)
		}
		hits++
		if err != nil || got != "10.0.0.53" {
			missed++
			if len(failures) < 5 {
				failures = append(failures, fmt.Sprintf("%s: %q, %v", name, got, err))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-floodErr; err != nil {
		t.Fatal(err)
	}
	peak := procKiB(t, a.Cmd.Process.Pid, "VmHWM")
	t.Logf("fastpath=%s stale=%v: idle RSS %d KiB, peak RSS %d KiB (%.2fx); flood %s; cache hits %d/%d answered (%d after a retry)",
		fastpath, stale, idle, peak, float64(peak)/float64(idle), f.summary(), hits-missed, hits, retried)
	if peak > 2*idle {
		t.Errorf("peak RSS %d KiB under the flood is more than twice the idle %d KiB", peak, idle)
	}
	if missed > 0 {
		t.Errorf("%d of %d lookups of cached names failed during the outage, e.g. %s", missed, hits, strings.Join(failures, "; "))
	}
	if f.sent.Load() < int64(floodRate*floodFor/time.Second)/2 {
		t.Errorf("the flood sent only %d queries in %s", f.sent.Load(), floodFor)
	}

}

// procKiB reads one "Name: N kB" field of /proc/<pid>/status.
func procKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s in /proc/%d/status: %v", field, pid, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
