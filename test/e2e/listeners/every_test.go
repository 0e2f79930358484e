package listeners

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/connlimit"
	"github.com/nodelocaldns/nodelocaldns/internal/listenlimit"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// tcpSocket is one line of /proc/PID/net/tcp{,6}.
type tcpSocket struct {
	local, remote netip.AddrPort
	listening     bool
	inode         uint64
}

// tcpSockets reads the TCP sockets of the namespace pid is in.
func tcpSockets(t *testing.T, pid int) []tcpSocket {
	t.Helper()
	var out []tcpSocket
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Scan()
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			inode, _ := strconv.ParseUint(fs[9], 10, 64)
			out = append(out, tcpSocket{local: hexAddrPort(fs[1]), remote: hexAddrPort(fs[2]), listening: fs[3] == "0A", inode: inode})
		}
		fh.Close()
	}
	return out
}

// hexAddrPort reads the kernel's "0100007F:0035": each 32-bit word of the address in host order, the port.
func hexAddrPort(s string) netip.AddrPort {
	h, p, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(p, 16, 16)
	raw, _ := hex.DecodeString(h)
	for i := 0; i+4 <= len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(a.Unmap(), uint16(port))
}

// socketInodes are the sockets pid has open, and how many descriptors it has in all.
func socketInodes(t *testing.T, pid int) (map[uint64]bool, int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]bool{}
	for _, e := range ents {
		link, err := os.Readlink(dir + "/" + e.Name())
		if n, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			if inode, err := strconv.ParseUint(strings.TrimSuffix(n, "]"), 10, 64); err == nil {
				m[inode] = true
			}
		}
	}
	return m, len(ents)
}

func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// everyFloodRate is each listener's share of the flood: idle connections a second from the one pod.
const everyFloodRate = 400

// TestEveryListenerBoundedUnderPodFlood: whatever TCP listeners the agent has open (found in its descriptors,
// not from a list, so that one added later is flooded too), a pod floods each one it can reach with idle
// connections, everyFloodRate a second each for floodFor. The pod is one source: on each listener the agent
// holds at most that listener's per-source bound of its connections (listenlimit's bounds for the agent's own
// listeners, connlimit's for DNS over TCP) plus a small margin; its RSS stays within twice its idle RSS; DNS is
// answered to another client, over UDP and TCP, and a scrape of CoreDNS's metrics from the node succeeds, all
// the while. A listener whose bound the test does not know fails it: give it one in listenlimit.
// Before CoreDNS's metrics listener (:9253) was bounded, the pod held as many connections there as it opened in
// its 5 s timeout (about 2,000 here; 20,000 and 370 MiB at the rate).
func TestEveryListenerBoundedUnderPodFlood(t *testing.T) {
	n := harness.NewNode(t)
	metricsPort := harness.FreePort(t)
	p := startPod(t, "-metrics-listen-address", "0.0.0.0:"+metricsPort)
	p.WaitReady()
	pid := p.Cmd.Process.Pid
	podIP := netip.MustParseAddr(n.Pod.Addr)

	// The agent's listeners, and the bound of each against one source.
	inodes, _ := socketInodes(t, pid)
	bound := map[uint16]int{
		8080: listenlimit.Health().PerSource, 9253: listenlimit.CoreDNSMetrics().PerSource, 53: connlimit.DefaultPerSource,
	}
	mp, _ := strconv.Atoi(metricsPort)
	bound[uint16(mp)] = listenlimit.AgentMetrics().PerSource
	var targets []string
	for _, s := range tcpSockets(t, pid) {
		if !s.listening || !inodes[s.inode] {
			continue
		}
		a := s.local.Addr()
		if a.IsLoopback() {
			t.Logf("listener %v: not reachable from a pod", s.local)
			continue
		}
		if _, ok := bound[s.local.Port()]; !ok {
			t.Errorf("listener %v: the test knows no bound for it (give it one in internal/listenlimit/bounds.go, and here)", s.local)
			continue
		}
		if a.IsUnspecified() {
			a = netip.MustParseAddr(harness.LocalIP)
		}
		targets = append(targets, netip.AddrPortFrom(a, s.local.Port()).String())
	}
	if len(targets) < 4 {
		t.Fatalf("found %d listeners the pod can reach (%v), want at least DNS on two addresses, health, CoreDNS's metrics and the agent's", len(targets), targets)
	}
	t.Logf("flooding %v", targets)

	time.Sleep(time.Second) // settle after start-up
	idleRSS := rssBytes(t, pid)
	_, idleFDs := socketInodes(t, pid)

	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var wg sync.WaitGroup
	for _, target := range targets {
		wg.Go(func() {
			var opened atomic.Int64
			holdIdle(ctx, t, n.Pod, target, everyFloodRate, &opened, math.MaxInt64)
		})
	}

	// Meanwhile: held connections per listener, RSS and descriptors sampled; DNS and a scrape from the node.
	// A connection is held once the agent has kept it for heldFor: what a flood of idle connections relies on.
	// One accepted over the bound lives until its reset, microseconds on an idle machine and longer on a starved
	// one; counting it would make the verdict depend on the machine's speed.
	const heldFor = time.Second
	firstSeen := map[uint64]time.Time{}
	peakHeld := map[uint16]int{}
	var peakRSS int64
	peakFDs, failures, checks, listedTwice := 0, 0, 0, 0
	for ctx.Err() == nil {
		now := time.Now()
		inodes, fds := socketInodes(t, pid)
		held := map[uint16]int{}
		// Each socket once: /proc/net/tcp is read in chunks while the flood adds and removes sockets, and the
		// kernel's walk can list one socket twice (that counted two held sockets as four against a bound of 2).
		counted := map[uint64]bool{}
		for _, s := range tcpSockets(t, pid) {
			if s.listening || s.remote.Addr() != podIP || !inodes[s.inode] {
				continue
			}
			if counted[s.inode] {
				listedTwice++
				continue
			}
			counted[s.inode] = true
			if _, ok := firstSeen[s.inode]; !ok {
				firstSeen[s.inode] = now
			}
			if now.Sub(firstSeen[s.inode]) >= heldFor {
				held[s.local.Port()]++
			}
		}
		for port, h := range held {
			peakHeld[port] = max(peakHeld[port], h)
		}
		peakRSS, peakFDs = max(peakRSS, rssBytes(t, pid)), max(peakFDs, fds)
		for _, netw := range []string{"udp", "tcp"} {
			checks++
			if _, err := harness.Lookup(net.JoinHostPort(harness.LocalIP, "53"), netw, "kubernetes.default.svc.cluster.local.", 2*time.Second); err != nil {
				failures++
				t.Logf("query over %s from the node during the flood: %v", netw, err)
			}
		}
		checks++
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := httpProbe(sctx, "http://127.0.0.1:9253/metrics"); err != nil {
			failures++
			t.Logf("scrape of :9253 from the node during the flood: %v", err)
		}
		scancel()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()

	t.Logf("idle: RSS %d MiB, %d descriptors; during the flood: peak RSS %d MiB, %d descriptors; held from the pod, per port: %v (sockets the kernel's walk listed twice, counted once: %d)",
		idleRSS>>20, idleFDs, peakRSS>>20, peakFDs, peakHeld, listedTwice)
	for port, h := range peakHeld {
		// The agent's own listeners reset a connection over the bound as they accept it, and give a place back
		// only once the socket is gone (listenlimit's conn.Close). The margin, one, is a connection accepted over
		// the bound whose reset a starved accept loop has not run yet: against 1,999 held before the bound.
		// (Beside a CPU hog :9253 was seen holding 4-5 against 2 while this test counted a socket each time the
		// kernel's walk listed it.) CoreDNS's DNS listeners are capped at accept where the fast path serves them,
		// by connlimit's passes elsewhere: what the pod opens in 100 ms more.
		margin := 1
		if port == 53 {
			margin = everyFloodRate / 10
		}
		if h > bound[port]+margin {
			t.Errorf("port %d: the agent held %d connections of the pod, want at most its bound %d + %d", port, h, bound[port], margin)
		}
	}
	if peakRSS > 2*idleRSS {
		t.Errorf("peak RSS %d MiB, more than twice the idle %d MiB", peakRSS>>20, idleRSS>>20)
	}
	if failures > 0 {
		t.Errorf("%d of %d queries and scrapes from the node failed during the flood", failures, checks)
	}
}
