package configmap

import (
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodelocaldns/nodelocaldns/internal/testenv"
	"github.com/nodelocaldns/nodelocaldns/test/harness"
)

// A reload that fails for a reason that passes is retried with backoff, not only on the next ConfigMap change:
// here a server block binds an address that does not exist yet; once it is added (and nothing else changes),
// the retry serves it.
func TestFailedReloadIsRetried(t *testing.T) {
	e := start(t, setup{})
	const extra = "169.254.20.11"
	errorsBefore := e.metric(reloadsError)
	base := harness.StandardCorefile(localIP, dnsServer, domain) +
		"\nexample.test:53 {\n    bind " + extra + "\n    forward . " + ip(upX) + "\n}\n"
	e.base.Update(t, map[string]string{"Corefile.base": base})
	e.waitMetric(reloadsError, errorsBefore)

	okBefore := e.metric(reloadsOK)
	testenv.Run(t, "ip", "addr", "add", extra+"/32", "dev", "lo")
	t.Cleanup(func() { exec.Command("ip", "addr", "del", extra+"/32", "dev", "lo").Run() })
	// The first retries come 1 s and 2 s after the failure.
	waited := testenv.Eventually(t, applyTimeout, "the failed reload to be retried and serve "+extra, func() bool {
		got, err := harness.Lookup(extra+":53", "udp", "q.example.test", queryTimeout)
		return err == nil && got == ansUpX
	})
	t.Logf("served %s %v after the address appeared", extra, waited)
	// The answer comes as soon as CoreDNS restarted; the count and the log line follow it.
	e.waitMetric(reloadsOK, okBefore)
	testenv.Eventually(t, applyTimeout, "a reload triggered by retry in the log", func() bool {
		for _, l := range e.logsSince(0, "reloaded coredns") {
			if triggers, _ := l.Raw["triggers"].([]any); slices.Contains(triggers, any("retry")) {
				return true
			}
		}
		return false
	})
}

// /health is the agent's own liveness: it fails while our DNS listener does not answer (here a foreign
// nftables rule drops the agent's own probe on its way to the listener, over UDP and TCP) and recovers when it
// answers again.
func TestHealthFailsWhileDNSDoesNotAnswer(t *testing.T) {
	e := start(t, setup{})
	c := &http.Client{Timeout: 3 * time.Second}
	if err := health(c); err != nil {
		t.Fatalf("/health before: %v", err)
	}
	testenv.Run(t, "nft", "add table inet blockdns { chain out { type filter hook output priority 0; ip daddr "+localIP+" meta l4proto { tcp, udp } th dport 53 drop; }; }")
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", "blockdns").Run() })
	var last error
	testenv.Eventually(t, 10*time.Second, "/health to fail", func() bool {
		last = health(c)
		return last != nil
	})
	if !strings.Contains(last.Error(), "503") || !strings.Contains(last.Error(), "does not answer") {
		t.Errorf("/health failed with %v, want 503 naming the listener that does not answer", last)
	}
	if v := e.metric(`nodelocaldns_liveness_failures_total{reason="dns"}`); v < 1 {
		t.Errorf("liveness failures (dns) = %v, want >= 1", v)
	}
	testenv.Run(t, "nft", "delete", "table", "inet", "blockdns")
	testenv.Eventually(t, 10*time.Second, "/health to recover", func() bool { return health(c) == nil })
}
