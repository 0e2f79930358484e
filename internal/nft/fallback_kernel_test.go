package nft

import (
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
)

func listFallback(t *testing.T) string {
	t.Helper()
	return testenv.Run(t, "nft", "-s", "list", "table", "inet", FallbackTableName)
}

func TestApplyFallbackListsAsGolden(t *testing.T) {
	c := freshConn(t)
	for _, tc := range fallbackCases {
		t.Run(tc.name, func(t *testing.T) {
			f := BuildFallback(tc.spec)
			for range 2 { // a second apply replaces, never adds
				if err := c.ApplyFallback(f); err != nil {
					t.Fatalf("ApplyFallback: %v", err)
				}
			}
			if got, want := listFallback(t), readGolden(t, tc.name); got != want {
				t.Errorf("nft -s list table differs from golden %s:\n--- kernel\n%s--- golden\n%s", tc.name, got, want)
			}
			if ok, err := c.FallbackInSync(f); !ok || err != nil {
				t.Errorf("FallbackInSync right after ApplyFallback = %v, %v; want true, nil", ok, err)
			}
		})
	}
}

var handle = regexp.MustCompile(`# handle (\d+)`)

// TestFallbackInSyncSeesChanges: whatever another process does to the (unowned) table, the read-back says so,
// and one apply puts it back.
func TestFallbackInSyncSeesChanges(t *testing.T) {
	c := freshConn(t)
	f := BuildFallback(fallbackCases[0].spec)
	other := BuildFallback(fallbackCases[1].spec)
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
	}{
		{"rule deleted", func(t *testing.T) {
			out := testenv.Run(t, "nft", "-a", "list", "chain", "inet", FallbackTableName, ChainPodReply)
			m := handle.FindAllStringSubmatch(out, -1)
			testenv.Run(t, "nft", "delete", "rule", "inet", FallbackTableName, ChainPodReply, "handle", m[len(m)-1][1])
		}},
		{"rule added", func(t *testing.T) {
			testenv.Run(t, "nft", "add", "rule", "inet", FallbackTableName, ChainPodPrerouting, "udp", "dport", "53", "drop")
		}},
		{"chain flushed", func(t *testing.T) {
			testenv.Run(t, "nft", "flush", "chain", "inet", FallbackTableName, ChainHostOutput)
		}},
		{"chain deleted", func(t *testing.T) {
			testenv.Run(t, "nft", "flush", "chain", "inet", FallbackTableName, ChainHostReply)
			testenv.Run(t, "nft", "delete", "chain", "inet", FallbackTableName, ChainHostReply)
		}},
		{"another spec", func(t *testing.T) {
			if err := c.ApplyFallback(other); err != nil {
				t.Fatal(err)
			}
		}},
		{"flush ruleset", func(t *testing.T) { testenv.Run(t, "nft", "flush", "ruleset") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.ApplyFallback(f); err != nil {
				t.Fatalf("ApplyFallback: %v", err)
			}
			tc.change(t)
			if ok, err := c.FallbackInSync(f); ok || err != nil {
				t.Errorf("FallbackInSync after %s = %v, %v; want false, nil", tc.name, ok, err)
			}
			if err := c.ApplyFallback(f); err != nil {
				t.Fatalf("ApplyFallback: %v", err)
			}
			if ok, err := c.FallbackInSync(f); !ok || err != nil {
				t.Errorf("FallbackInSync after repair = %v, %v; want true, nil", ok, err)
			}
		})
	}
}

// TestFallbackOutlivesConn: the table is not owned, so closing the socket that made it keeps it; deleting it
// twice is not an error.
func TestFallbackOutlivesConn(t *testing.T) {
	c := freshConn(t)
	if err := c.ApplyFallback(BuildFallback(fallbackCases[0].spec)); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	c2, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.ApplyFallback(BuildFallback(fallbackCases[0].spec)); err != nil {
		t.Fatalf("second instance's ApplyFallback: %v", err)
	}
	c2.Close()
	if out := testenv.Run(t, "nft", "list", "tables"); !strings.Contains(out, "table inet "+FallbackTableName) {
		t.Fatalf("fallback table gone with the socket that applied it:\n%s", out)
	}
	// Stopping keeps the reply rewrites for the queries in flight, and redirects no new one.
	if had, err := c.StopFallback(); !had || err != nil {
		t.Fatalf("StopFallback = %v, %v; want true, nil", had, err)
	}
	if l := listFallback(t); strings.Contains(l, "daddr set") || !strings.Contains(l, "saddr set") {
		t.Errorf("a stopped fallback must keep its reply rewrites only:\n%s", l)
	}
	for _, want := range []bool{true, false} {
		if had, err := c.DeleteFallback(); had != want || err != nil {
			t.Errorf("DeleteFallback = %v, %v; want %v, nil", had, err, want)
		}
	}
	if had, err := c.StopFallback(); had || err != nil {
		t.Errorf("StopFallback without a table = %v, %v; want false, nil", had, err)
	}
}

// TestFallbackTraffic is the fallback with real packets: with no listener on the link-local address, a pod's
// and a host-network client's queries to it are answered by kube-dns through a kube-proxy-like DNAT of the
// upstream ClusterIP, from the link-local address; with an instance taking them (pods': serving and
// listening; the host's: registered) they are answered locally; with the instance gone, by kube-dns again,
// even while the listener stays. UDP and TCP.
func TestFallbackTraffic(t *testing.T) {
	c := freshConn(t)
	pn := testenv.NewPodNetwork(t)
	pod, podLink := pn.Pod, pn.Pod.HostIf
	const upstream = "10.96.0.11"
	testenv.Run(t, "ip", "addr", "add", linkLocalIP+"/32", "dev", podLink)
	testenv.Run(t, "ip", "route", "add", "10.96.0.0/16", "via", kubeDNSPodIP) // every node routes the service range
	pn.KubeDNS.Do(t, func() { startDNS(t, kubeDNSPodIP, kubeDNSAnswer) })
	testenv.NftApply(t, `table inet kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr `+upstream+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		ip daddr `+upstream+` meta l4proto { tcp, udp } th dport 53 dnat ip to `+kubeDNSPodIP+`:53
	}
}
`)
	ll := netip.MustParseAddr(linkLocalIP)
	if err := c.ApplyFallback(BuildFallback(FallbackSpec{LocalIPs: []netip.Addr{ll}, Upstream: netip.MustParseAddr(upstream), DNSPort: 53})); err != nil {
		t.Fatalf("ApplyFallback: %v", err)
	}
	fromHost := func(tcp bool) string {
		args := []string{"+short", "+tries=1", "+time=2", "@" + linkLocalIP, "test.example.", "A"}
		if tcp {
			args = append(args, "+tcp")
		}
		out, _ := exec.Command("dig", args...).CombinedOutput()
		if s := strings.TrimSpace(string(out)); !strings.Contains(s, ";;") {
			return s
		}
		return ""
	}
	expect := func(when, wantPod, wantHost string) {
		t.Helper()
		for _, tcp := range []bool{false, true} {
			if got := digFrom(t, pod, linkLocalIP, tcp); got != wantPod {
				t.Errorf("%s: pod's query (tcp=%v) answered %q, want %q", when, tcp, got, wantPod)
			}
			if got := fromHost(tcp); got != wantHost {
				t.Errorf("%s: host-network query (tcp=%v) answered %q, want %q", when, tcp, got, wantHost)
			}
		}
	}
	expect("no listener, no instance", kubeDNSAnswer, kubeDNSAnswer)
	spec := Spec{LocalIPs: []netip.Addr{ll}, DNSPort: 53, HealthPort: 8080}
	if err := c.Apply(Registration(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// Registered, CoreDNS not bound yet (a restart after SIGKILL spends its start-up here): nothing local could
	// answer, so everyone's queries go to kube-dns.
	expect("instance registered, not listening", kubeDNSAnswer, kubeDNSAnswer)
	stop := startDNS(t, linkLocalIP, localAnswer)
	if err := c.Apply(Listening(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// A starting instance (registered, listening, not serving yet) gets its own and the node's queries (its
	// `loop` probes must reach it), not the pods' (its configuration is not checked yet).
	expect("instance registered, listening", kubeDNSAnswer, localAnswer)
	if err := c.Apply(Build(spec)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	expect("instance serving", localAnswer, localAnswer)
	stop()
	if err := c.Teardown(); err != nil { // what the kernel does when the instance dies
		t.Fatalf("Teardown: %v", err)
	}
	expect("instance gone", kubeDNSAnswer, kubeDNSAnswer)
	startDNS(t, linkLocalIP, localAnswer)
	expect("listener back, no instance table yet", kubeDNSAnswer, kubeDNSAnswer)
}
