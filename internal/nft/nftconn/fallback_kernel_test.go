package nftconn

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/nft"
	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func listFallback(t *testing.T) string {
	t.Helper()
	return testenv.Run(t, "nft", "-s", "list", "table", "inet", nft.FallbackTableName)
}

// sortElements sorts the element lines of every concatenated set in a listing: the kernel lists a hash set's
// elements in its hash's order, which no printer can know.
func sortElements(listing string) string {
	lines := strings.Split(listing, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], "\t\telements = { ")
		if !ok {
			continue
		}
		var elems []string
		j := i
		for {
			e := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(rest), " }"), ",")
			elems = append(elems, e)
			if strings.HasSuffix(rest, " }") || j+1 == len(lines) {
				break
			}
			j++
			rest = lines[j]
		}
		slices.Sort(elems)
		for k, e := range elems {
			switch {
			case k == 0:
				e = "\t\telements = { " + e
			default:
				e = "\t\t\t     " + e
			}
			if k == len(elems)-1 {
				e += " }"
			} else {
				e += ","
			}
			lines[i+k] = e
		}
		i = j
	}
	return strings.Join(lines, "\n")
}

func TestApplyFallbackListsAsGolden(t *testing.T) {
	c := freshConn(t)
	for _, tc := range fallbackCases {
		t.Run(tc.name, func(t *testing.T) {
			f := nft.BuildFallback(tc.spec)
			for range 2 { // a second apply replaces, never adds
				if err := c.Fallback().Apply(f); err != nil {
					t.Fatalf("ApplyFallback: %v", err)
				}
			}
			if got, want := sortElements(listFallback(t)), sortElements(readGolden(t, tc.name)); got != want {
				t.Errorf("nft -s list table differs from golden %s:\n--- kernel\n%s--- golden\n%s", tc.name, got, want)
			}
			if ok, err := c.Fallback().InSync(f); !ok || err != nil {
				t.Errorf("FallbackInSync right after ApplyFallback = %v, %v; want true, nil", ok, err)
			}
		})
	}
}

// TestFallbackLease: FallbackLease reports the least time left on the covered pairs, and a pair with another
// timeout is still in sync (instances of other -fallback-lease values must not fight over the table).
func TestFallbackLease(t *testing.T) {
	c := freshConn(t)
	f := nft.BuildFallback(fallbackCases[0].spec) // a 15m lease
	if _, any, err := c.Fallback().Lease(); any || err != nil {
		t.Fatalf("FallbackLease without a table = %v, %v; want none, nil", any, err)
	}
	if err := c.Fallback().Apply(f); err != nil {
		t.Fatal(err)
	}
	left, any, err := c.Fallback().Lease()
	if !any || err != nil || left > 15*time.Minute || left < 14*time.Minute {
		t.Fatalf("FallbackLease right after ApplyFallback = %v, %v, %v; want about 15m", left, any, err)
	}
	testenv.Run(t, "nft", "delete", "element", "inet", nft.FallbackTableName, nft.SetCovered4, "{ 169.254.20.10 . 53 }")
	testenv.Run(t, "nft", "add", "element", "inet", nft.FallbackTableName, nft.SetCovered4, "{ 169.254.20.10 . 53 timeout 1m }")
	if left, _, _ := c.Fallback().Lease(); left > time.Minute {
		t.Errorf("FallbackLease = %v, want at most the 1m the element was given", left)
	}
	if ok, err := c.Fallback().InSync(f); !ok || err != nil {
		t.Errorf("FallbackInSync with a pair of another timeout = %v, %v; want true, nil", ok, err)
	}
}

var handle = regexp.MustCompile(`# handle (\d+)`)

// TestFallbackInSyncSeesChanges: whatever another process does to the (unowned) table, the read-back says so,
// and one apply puts it back.
func TestFallbackInSyncSeesChanges(t *testing.T) {
	c := freshConn(t)
	f := nft.BuildFallback(fallbackCases[0].spec)
	other := nft.BuildFallback(fallbackCases[1].spec)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
	}{
		{"rule deleted", func(t *testing.T) {
			out := testenv.Run(t, "nft", "-a", "list", "chain", "inet", nft.FallbackTableName, nft.ChainPodReply)
			m := handle.FindAllStringSubmatch(out, -1)
			testenv.Run(t, "nft", "delete", "rule", "inet", nft.FallbackTableName, nft.ChainPodReply, "handle", m[len(m)-1][1])
		}},
		{"rule added", func(t *testing.T) {
			testenv.Run(t, "nft", "add", "rule", "inet", nft.FallbackTableName, nft.ChainPodPrerouting, "udp", "dport", "53", "drop")
		}},
		{"chain flushed", func(t *testing.T) {
			testenv.Run(t, "nft", "flush", "chain", "inet", nft.FallbackTableName, nft.ChainHostOutput)
		}},
		{"element deleted", func(t *testing.T) {
			testenv.Run(t, "nft", "delete", "element", "inet", nft.FallbackTableName, nft.SetCovered4, "{ 169.254.20.10 . 53 }")
		}},
		{"element added", func(t *testing.T) {
			testenv.Run(t, "nft", "add", "element", "inet", nft.FallbackTableName, nft.SetCovered4, "{ 10.0.0.1 . 53 timeout 15m }")
		}},
		{"chain deleted", func(t *testing.T) {
			testenv.Run(t, "nft", "flush", "chain", "inet", nft.FallbackTableName, nft.ChainHostReply)
			testenv.Run(t, "nft", "delete", "chain", "inet", nft.FallbackTableName, nft.ChainHostReply)
		}},
		{"another spec", func(t *testing.T) {
			if err := c.Fallback().Apply(other); err != nil {
				t.Fatal(err)
			}
		}},
		{"flush ruleset", func(t *testing.T) { testenv.Run(t, "nft", "flush", "ruleset") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Fallback().Apply(f); err != nil {
				t.Fatalf("ApplyFallback: %v", err)
			}
			tc.change(t)
			if ok, err := c.Fallback().InSync(f); ok || err != nil {
				t.Errorf("FallbackInSync after %s = %v, %v; want false, nil", tc.name, ok, err)
			}
			if err := c.Fallback().Apply(f); err != nil {
				t.Fatalf("ApplyFallback: %v", err)
			}
			if ok, err := c.Fallback().InSync(f); !ok || err != nil {
				t.Errorf("FallbackInSync after repair = %v, %v; want true, nil", ok, err)
			}
		})
	}
}

// TestFallbackOutlivesConn: the table is not owned, so closing the socket that made it keeps it; deleting it
// twice is not an error.
func TestFallbackOutlivesConn(t *testing.T) {
	c := freshConn(t)
	if err := c.Fallback().Apply(nft.BuildFallback(fallbackCases[0].spec)); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Fallback().Apply(nft.BuildFallback(fallbackCases[0].spec)); err != nil {
		t.Fatalf("second instance's ApplyFallback: %v", err)
	}
	c2.Close()
	if out := testenv.Run(t, "nft", "list", "tables"); !strings.Contains(out, "table inet "+nft.FallbackTableName) {
		t.Fatalf("fallback table gone with the socket that applied it:\n%s", out)
	}
	// Stopping keeps the reply rewrites for the queries in flight, and redirects no new one.
	if had, err := c.Fallback().Stop(); !had || err != nil {
		t.Fatalf("StopFallback = %v, %v; want true, nil", had, err)
	}
	if l := listFallback(t); strings.Contains(l, "daddr set") || !strings.Contains(l, "saddr set") {
		t.Errorf("a stopped fallback must keep its reply rewrites only:\n%s", l)
	}
	for _, want := range []bool{true, false} {
		if had, err := c.Fallback().Delete(); had != want || err != nil {
			t.Errorf("DeleteFallback = %v, %v; want %v, nil", had, err, want)
		}
	}
	if had, err := c.Fallback().Stop(); had || err != nil {
		t.Errorf("StopFallback without a table = %v, %v; want false, nil", had, err)
	}
}

// TestFallbackTraffic is the fallback with real packets: with nothing taking the link-local address, a pod's
// and a host-network client's queries to it are answered by kube-dns through a kube-proxy-like DNAT of the
// kube-dns ClusterIP, from the link-local address; with an instance taking them (pods': serving and
// listening; the host's: listening) they are answered locally; with the instance gone, by kube-dns again,
// even while the listener stays; with node-cache's NOTRACK in place (a rollback), locally by node-cache.
// UDP and TCP. Then the lease runs out: the table matches nothing more.
func TestFallbackTraffic(t *testing.T) {
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, podLink := pn.Pod, pn.Pod.HostIf
	const kubeDNS = "10.96.0.10"
	testenv.Run(t, "ip", "addr", "add", linkLocalIP+"/32", "dev", podLink)
	testenv.Run(t, "ip", "route", "add", "10.96.0.0/16", "via", kubeDNSPodIP) // every node routes the service range
	pn.KubeDNS.Do(t, func() { startDNS(t, kubeDNSPodIP, kubeDNSAnswer) })
	testenv.NftApply(t, `table inet kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr `+kubeDNS+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		ip daddr `+kubeDNS+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
	}
}
`)
	ll := netip.MustParseAddr(linkLocalIP)
	fallback := func(lease time.Duration) {
		t.Helper()
		f := nft.BuildFallback(nft.FallbackSpec{Targets: []netip.Addr{netip.MustParseAddr(kubeDNS)}, Covered: []netip.AddrPort{netip.AddrPortFrom(ll, 53)}, Lease: lease})
		if err := c.Fallback().Apply(f); err != nil {
			t.Fatalf("ApplyFallback: %v", err)
		}
	}
	fallback(time.Hour)
	expect := func(when, wantPod, wantHost string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, linkLocalIP, tcp); got != wantPod {
				t.Errorf("%s: pod's query (tcp=%v) answered %q, want %q", when, tcp, got, wantPod)
			}
			if got := digFromHost(linkLocalIP, tcp); got != wantHost {
				t.Errorf("%s: host-network query (tcp=%v) answered %q, want %q", when, tcp, got, wantHost)
			}
		}
	}
	expect("no listener, no instance", kubeDNSAnswer, kubeDNSAnswer)
	spec := nft.Spec{LocalIPs: []netip.Addr{ll}, DNSPort: 53, HealthPort: 8080}
	if err := c.Apply(nft.Registration(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// Registered, CoreDNS not bound yet (a restart after SIGKILL spends its start-up here): nothing local could
	// answer, so everyone's queries go to kube-dns.
	expect("instance registered, not listening", kubeDNSAnswer, kubeDNSAnswer)
	stop := startDNS(t, linkLocalIP, localAnswer)
	if err := c.Apply(nft.Listening(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// A starting instance (registered, listening, not serving yet) gets its own and the node's queries (its
	// `loop` probes must reach it), not the pods' (its configuration is not checked yet).
	expect("instance registered, listening", kubeDNSAnswer, localAnswer)
	if err := c.Apply(nft.Build(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect("instance serving", localAnswer, localAnswer)
	if err := c.Teardown(); err != nil { // what the kernel does when the instance dies
		t.Fatalf("Teardown: %v", err)
	}
	expect("instance gone, its listener still bound", kubeDNSAnswer, kubeDNSAnswer)
	// node-cache back (a rollback): its NOTRACK in raw PREROUTING and OUTPUT, as iptables-nft writes them, and
	// its listener. Untracked is taken: the fallback leaves node-cache its queries.
	testenv.NftApply(t, `table ip raw {
	chain PREROUTING {
		type filter hook prerouting priority raw; policy accept;
		ip daddr `+linkLocalIP+` udp dport 53 notrack
		ip daddr `+linkLocalIP+` tcp dport 53 notrack
	}
	chain OUTPUT {
		type filter hook output priority raw; policy accept;
		ip saddr `+linkLocalIP+` udp sport 53 notrack
		ip saddr `+linkLocalIP+` tcp sport 53 notrack
		ip daddr `+linkLocalIP+` udp dport 53 notrack
		ip daddr `+linkLocalIP+` tcp dport 53 notrack
	}
}
`)
	expect("node-cache's NOTRACK and listener", localAnswer, localAnswer)
	testenv.Run(t, "nft", "delete", "table", "ip", "raw")
	stop()
	expect("nothing listening again", kubeDNSAnswer, kubeDNSAnswer)
	// The lease: a new one, short, that nobody renews; once it has run out the rules match nothing, and the pod's
	// query is refused as it would be on a node that never had us. (The queries above ran under the hour's
	// lease: under this one, four dig runs in a loaded VM had outlasted it, and the last found it run out.)
	const lease = 3 * time.Second
	fallback(lease)
	applied := time.Now()
	time.Sleep(time.Until(applied.Add(lease + time.Second)))
	if l := listFallback(t); strings.Contains(l, "elements") {
		t.Errorf("the covered pairs outlived their lease (%v):\n%s", lease, l)
	}
	expect("after the lease", "", "")
}
