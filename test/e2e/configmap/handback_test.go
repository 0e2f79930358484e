package configmap

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A reload after which the fast path can no longer serve an address gives the address back to CoreDNS's socket:
// here the node-local-dns ConfigMap turns `log` on in every block (a plugin before cache that logs each query,
// so every query must go through CoreDNS's chain). Misses are in flight throughout (kube-dns-upstream answers
// after 300 to 800 ms, each name is new), so the fast path's miss server is still answering when CoreDNS's
// socket takes the address over. Every query sent across the handover must be answered.
func TestReloadGivingTheAddressBackLosesNoMiss(t *testing.T) {
	e := start(t, setup{})
	e.agent.WaitLog(applyTimeout, "the fast path serving "+dnsAddr, func(l harness.LogLine) bool {
		return l.Msg == "fast path serving" && l.Raw["addr"] == dnsAddr
	})
	e.ups[clusterUp].SetDelay(300*time.Millisecond, 800*time.Millisecond)

	dial := func(target string) (*net.UDPConn, error) {
		return net.DialUDP("udp", nil, &net.UDPAddr{IP: net.ParseIP(target), Port: 53})
	}
	// 200 queries/s; a query unanswered after queryTimeout is lost (the slowest upstream answer takes 0.8 s).
	m := harness.StartMisses(t, dial, "svc."+domain, 5*time.Millisecond, queryTimeout, localIP)
	time.Sleep(time.Second) // up to 0.8 s of misses in flight
	n := len(e.agent.Lines())
	withLog := strings.ReplaceAll(harness.StandardCorefile(localIP, dnsServer, domain), "errors\n", "errors\n        log\n")
	e.base.Update(t, map[string]string{"Corefile.base": withLog})
	e.agent.WaitLog(applyTimeout, "the fast path giving "+dnsAddr+" back", func(l harness.LogLine) bool {
		return l.Msg == "fast path steps aside" && l.Raw["addr"] == dnsAddr
	})
	testenv.Eventually(t, applyTimeout, "the reload to finish", func() bool { return len(e.logsSince(n, "reloaded coredns")) > 0 })
	time.Sleep(1500 * time.Millisecond) // past the miss server's drain
	c := m.Stop()
	t.Logf("slow misses (300-800 ms upstream) across a reload that gives the address back to coredns: %v", c)
	if c.Answers[ansCluster] == 0 {
		t.Errorf("no query answered by kube-dns-upstream (%s): %v", ansCluster, c)
	}
	if c.Lost > 0 {
		t.Errorf("%d of %d misses lost across the handover: %v", c.Lost, c.Sent, c)
	}
}
